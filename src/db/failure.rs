//! What a failed database call means for the caller, by SQLSTATE class (PostgreSQL's appendix A):
//! worth retrying, proof that the data cannot be stored, or anything else.

use postgres::error::SqlState;

/// How a database call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Gone or busy for now: the connection (class 08, the server shutting down 57P, an io error),
    /// a session that may not write (25006: a standby, or a primary demoted under it), the server's
    /// resources (53: too many clients, out of memory, disk full), a conflict with another session
    /// (40001, 40P01, 55P03) or a timeout (57014). The same call may succeed later.
    Transient,
    /// The data cannot be stored as it is (22: data exception, 54: program limit exceeded): the
    /// same statement fails the same way every time.
    Data,
    /// Anything else: a conversion on the client's side, a schema that does not match, a bug.
    Other,
}

/// How `error` (a database call's, somewhere in the chain) failed.
pub(crate) fn classify(error: &anyhow::Error) -> Failure {
    for cause in error.chain() {
        if let Some(pg) = cause.downcast_ref::<postgres::Error>() {
            if pg.is_closed() {
                return Failure::Transient;
            }
            if let Some(code) = pg.code() {
                return classify_code(code);
            }
        }
        if cause.downcast_ref::<std::io::Error>().is_some() {
            return Failure::Transient;
        }
    }
    Failure::Other
}

fn classify_code(code: &SqlState) -> Failure {
    let code = code.code();
    let transient = [READ_ONLY, "40001", "40P01", "55P03", "57014"].contains(&code)
        || code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57P");
    if transient {
        Failure::Transient
    } else if code.starts_with("22") || code.starts_with("54") {
        Failure::Data
    } else {
        Failure::Other
    }
}

/// Whether `error` is the database refusing a statement in a way no wait changes: a privilege the
/// role lacks, a table, column or function the schema does not have. Not an outage, whatever
/// `classify` says of it (a database closed to connections, a server that does not answer, are
/// `Other` there, and pass).
pub(crate) fn is_refused_for_good(error: &anyhow::Error) -> bool {
    const FOR_GOOD: [&str; 5] = ["42501", "42P01", "42703", "42883", "3F000"];
    sqlstate(error).is_some_and(|code| FOR_GOOD.contains(&code.code()))
}

/// Whether `error` is a wait for a lock that ended before its statement's timeout (55P03,
/// lock_not_available: `Database::connect_bounded` sets such a lock timeout): the database
/// answered, and another session held the rows all that time.
pub(crate) fn is_lock_held(error: &anyhow::Error) -> bool {
    sqlstate(error).is_some_and(|code| *code == SqlState::LOCK_NOT_AVAILABLE)
}

/// The SQLSTATE of the database's error somewhere in `error`'s chain.
pub(crate) fn sqlstate(error: &anyhow::Error) -> Option<&SqlState> {
    error.chain().find_map(|cause| cause.downcast_ref::<postgres::Error>().and_then(postgres::Error::code))
}

/// `read_only_sql_transaction`: a write in a session that may not write. The session stays so (a
/// standby's; one that began while its role or database said `default_transaction_read_only`), a
/// new one may not be (the primary a failover made, the setting taken back).
const READ_ONLY: &str = "25006";

/// Whether the connection is gone or of no more use (it must be made again), as opposed to a
/// statement that failed on a connection still usable.
pub(crate) fn is_connection_lost(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| match cause.downcast_ref::<postgres::Error>() {
        Some(pg) => {
            pg.is_closed()
                || pg.code().is_some_and(|code| {
                    let code = code.code();
                    code.starts_with("08") || code.starts_with("57P") || code == READ_ONLY
                })
        }
        None => cause.downcast_ref::<std::io::Error>().is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_are_classified_by_what_a_retry_can_change() {
        for code in [
            "08006", "08001", "57P01", "57P02", "57P03", "25006", "53300", "53200", "53100", "40001", "40P01", "55P03",
            "57014",
        ] {
            assert_eq!(classify_code(&SqlState::from_code(code)), Failure::Transient, "{code}");
        }
        for code in ["22P05", "22021", "22001", "54000", "54001"] {
            assert_eq!(classify_code(&SqlState::from_code(code)), Failure::Data, "{code}");
        }
        for code in ["42P01", "23505", "42703", "XX000"] {
            assert_eq!(classify_code(&SqlState::from_code(code)), Failure::Other, "{code}");
        }
    }

    #[test]
    fn an_io_error_is_transient_and_a_plain_error_is_not() {
        let io = anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(classify(&io), Failure::Transient);
        assert!(is_connection_lost(&io));
        let plain = anyhow::anyhow!("error serializing parameter 1");
        assert_eq!(classify(&plain), Failure::Other);
        assert!(!is_connection_lost(&plain));
    }
}
