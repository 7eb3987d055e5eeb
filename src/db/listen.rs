//! LISTEN, look, wait until a deadline: how wf waits for what another session commits (a job's
//! completion, a job to claim).

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use anyhow::Result;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Notification, Notifications};

/// A connection that LISTENs on a channel.
pub(crate) struct Listener<'c> {
    client: &'c mut Client,
}

impl<'c> Listener<'c> {
    /// LISTEN on `channel`. Notifications already pending are dropped: the next look covers them.
    pub(crate) fn listen(client: &'c mut Client, channel: &str) -> Result<Listener<'c>> {
        client.batch_execute(&format!("LISTEN {channel}"))?;
        discard_pending(&mut client.notifications())?;
        Ok(Listener { client })
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
        loop {
            let looked = look(self.client)?;
            let now = Instant::now();
            if looked.is_break() || deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(looked);
            }
            let until = deadline.map_or(now + poll, |deadline| deadline.min(now + poll));
            self.wait(until, &wakes)?;
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

fn discard_pending(notifications: &mut Notifications<'_>) -> Result<()> {
    while notifications.iter().next()?.is_some() {}
    Ok(())
}
