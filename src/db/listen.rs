//! LISTEN, look, wait until a deadline: how wf waits for what another session commits (a job's
//! completion, a job to claim).

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use anyhow::Result;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Notification, Notifications};

/// How long a listener that lost its connection tries to make one again (at most its deadline).
const RECONNECT_PATIENCE: Duration = Duration::from_secs(60);

/// A new connection, for a listener whose connection was lost.
pub(crate) type Connect<'c> = &'c dyn Fn() -> Result<Client>;

/// A connection that LISTENs on a channel.
pub(crate) struct Listener<'c> {
    client: &'c mut Client,
    channel: String,
    /// How to connect again when the connection is lost (a restart, a failover): the wait goes on
    /// on a new connection, and its next look covers what was missed meanwhile.
    again: Option<Connect<'c>>,
}

impl<'c> Listener<'c> {
    /// LISTEN on `channel`. Notifications already pending are dropped: the next look covers them.
    pub(crate) fn listen(client: &'c mut Client, channel: &str) -> Result<Listener<'c>> {
        client.batch_execute(&format!("LISTEN {channel}"))?;
        discard_pending(&mut client.notifications())?;
        Ok(Listener { client, channel: channel.to_string(), again: None })
    }

    /// The same, connecting again with `again` when the connection is lost.
    pub(crate) fn reconnecting(client: &'c mut Client, channel: &str, again: Connect<'c>) -> Result<Listener<'c>> {
        Ok(Listener { again: Some(again), ..Listener::listen(client, channel)? })
    }

    /// After `error`: a new connection, listening, when the error is a lost connection and this
    /// listener may connect again, within RECONNECT_PATIENCE and `deadline`; else the error.
    fn recover(&mut self, error: anyhow::Error, deadline: Option<Instant>) -> Result<()> {
        let Some(again) = self.again.filter(|_| super::failure::is_connection_lost(&error)) else {
            return Err(error);
        };
        crate::diag!("the connection to the database was lost ({error:#}); connecting again");
        let give_up = Instant::now() + RECONNECT_PATIENCE;
        let give_up = deadline.map_or(give_up, |deadline| deadline.min(give_up));
        loop {
            let listening = again().and_then(|mut client| {
                client.batch_execute(&format!("LISTEN {}", self.channel))?;
                Ok(client)
            });
            match listening {
                Ok(client) => {
                    *self.client = client;
                    return Ok(());
                }
                Err(failed) if Instant::now() >= give_up => {
                    return Err(failed.context("connecting again to the database after losing the connection"));
                }
                Err(_) => std::thread::sleep(Duration::from_secs(1)),
            }
        }
    }

    /// Look, and until a look breaks or `deadline` passes, wait for a notification that `wakes`
    /// accepts (at most `poll`: it covers a lost notification and changes nobody announces) and
    /// look again. Listening started before the first look, so nothing committed in between is
    /// missed. Returns the look's break, or its last continue once the deadline passed.
    ///
    /// The deadline is kept however many other notifications arrive (postgres's `TimeoutIter`
    /// restarts its timeout at each notification, so it cannot be waited on as one deadline).
    pub(crate) fn look_until<B, C>(
        &mut self,
        deadline: Option<Instant>,
        poll: Duration,
        wakes: impl Fn(&Notification) -> bool,
        mut look: impl FnMut(&mut Client) -> Result<ControlFlow<B, C>>,
    ) -> Result<ControlFlow<B, C>> {
        // The last look's continue: what the wait ends on when its deadline passes while the
        // database is away (it ended with the error of the connection, exit 1 where a wait that
        // timed out exits 3).
        let mut last: Option<C> = None;
        loop {
            let looked = match look(self.client) {
                Ok(looked) => looked,
                Err(error) => {
                    if let Err(failed) = self.recover(error, deadline) {
                        return timed_out_away(failed, deadline, last);
                    }
                    continue;
                }
            };
            let now = Instant::now();
            let continued = match looked {
                ControlFlow::Continue(continued) if deadline.is_none_or(|deadline| now < deadline) => continued,
                looked => return Ok(looked),
            };
            last = Some(continued);
            let until = deadline.map_or(now + poll, |deadline| deadline.min(now + poll));
            if let Err(error) = self.wait(until, &wakes)
                && let Err(failed) = self.recover(error, deadline)
            {
                return timed_out_away(failed, deadline, last);
            }
        }
    }

    /// Block until a notification that `wakes` accepts, or `until`. The notifications read on the
    /// way are dropped, and so is every one pending after a waking one: one look serves them all.
    fn wait(&mut self, until: Instant, wakes: &impl Fn(&Notification) -> bool) -> Result<()> {
        let mut notifications = self.client.notifications();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            // A fresh iterator per notification, given only the time left. `None` is the time up
            // or a closed connection, which the next look reports.
            match notifications.timeout_iter(left).next()? {
                Some(notification) if wakes(&notification) => break,
                Some(_) => {}
                None => return Ok(()),
            }
        }
        discard_pending(&mut notifications)
    }
}

/// A wait whose connection could not be made again: timed out, on what its last look saw, when its
/// deadline has passed meanwhile; else the error.
fn timed_out_away<B, C>(
    failed: anyhow::Error,
    deadline: Option<Instant>,
    last: Option<C>,
) -> Result<ControlFlow<B, C>> {
    match last {
        Some(last)
            if deadline.is_some_and(|deadline| Instant::now() >= deadline)
                && super::failure::is_connection_lost(&failed) =>
        {
            crate::diag!("{failed:#}");
            Ok(ControlFlow::Continue(last))
        }
        _ => Err(failed),
    }
}

fn discard_pending(notifications: &mut Notifications<'_>) -> Result<()> {
    while notifications.iter().next()?.is_some() {}
    Ok(())
}
