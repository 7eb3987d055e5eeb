//! A job's words: where it stands (`JobStatus`), where it came from (`TriggerKind`) and how it
//! failed (`JobError`). One type each, for the commands, the statements and the documents alike;
//! the first two are stored and compared as the text SPEC names them by.

use std::error::Error;
use std::fmt;
use std::str::FromStr;

use postgres::types::{FromSql, Type};
use serde::Serialize;
use serde_json::Value;

/// Where a job stands. The last three are how it ended (job_completed.status); the first three are
/// read from its queue row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Queued,
    /// Waiting, not due yet.
    Scheduled,
    Running,
    Success,
    Failure,
    Canceled,
}

impl JobStatus {
    pub(crate) const ALL: [JobStatus; 6] = [
        JobStatus::Queued,
        JobStatus::Scheduled,
        JobStatus::Running,
        JobStatus::Success,
        JobStatus::Failure,
        JobStatus::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Scheduled => "scheduled",
            JobStatus::Running => "running",
            JobStatus::Success => "success",
            JobStatus::Failure => "failure",
            JobStatus::Canceled => "canceled",
        }
    }

    /// Success, failure or canceled: the job has its completion record and never runs again.
    pub fn is_finished(self) -> bool {
        matches!(self, JobStatus::Success | JobStatus::Failure | JobStatus::Canceled)
    }
}

/// Where a job came from: provenance, not a separate write path (seed: "Single enqueue path").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TriggerKind {
    Manual,
    Api,
    Webhook,
    Schedule,
}

impl TriggerKind {
    pub(crate) const ALL: [TriggerKind; 4] =
        [TriggerKind::Manual, TriggerKind::Api, TriggerKind::Webhook, TriggerKind::Schedule];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TriggerKind::Manual => "manual",
            TriggerKind::Api => "api",
            TriggerKind::Webhook => "webhook",
            TriggerKind::Schedule => "schedule",
        }
    }
}

/// A word of the database that names no variant.
#[derive(Debug)]
pub struct Unknown {
    what: &'static str,
    text: String,
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a {}", self.text, self.what)
    }
}

impl Error for Unknown {}

/// Text in the database and in every document; given to a statement as `as_str()`.
macro_rules! stored_as_text {
    ($type:ty, $what:literal) => {
        impl FromStr for $type {
            type Err = Unknown;

            fn from_str(text: &str) -> Result<$type, Unknown> {
                <$type>::ALL
                    .into_iter()
                    .find(|variant| variant.as_str() == text)
                    .ok_or_else(|| Unknown { what: $what, text: text.to_string() })
            }
        }

        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl<'a> FromSql<'a> for $type {
            fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<$type, Box<dyn Error + Sync + Send>> {
                Ok(<&str as FromSql>::from_sql(ty, raw)?.parse()?)
            }

            fn accepts(ty: &Type) -> bool {
                <&str as FromSql>::accepts(ty)
            }
        }
    };
}

stored_as_text!(JobStatus, "job status");
stored_as_text!(TriggerKind, "trigger kind");

/// A failed job's error as recorded, and as `wf result` prints it: `{"name","message","stack"}`.
/// Errors the action threw are recorded as the wrapper wrote them; this is wf's own diagnosis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct JobError {
    pub name: String,
    pub message: String,
    pub stack: Option<String>,
}

impl JobError {
    pub(crate) fn new(name: &str, message: impl Into<String>) -> JobError {
        JobError { name: name.to_string(), message: message.into(), stack: None }
    }

    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a JobError is plain JSON")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_reads_back_as_itself() {
        for status in JobStatus::ALL {
            assert_eq!(status.as_str().parse::<JobStatus>().unwrap(), status);
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        for kind in TriggerKind::ALL {
            assert_eq!(kind.as_str().parse::<TriggerKind>().unwrap(), kind);
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
        assert!("done".parse::<JobStatus>().is_err());
    }
}
