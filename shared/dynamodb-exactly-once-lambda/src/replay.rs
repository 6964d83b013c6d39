//! Replaying dead letters through a writer after a fix: in source order, one deployment at a
//! time, never twice.
//!
//! * Letters are replayed in the order their records had in the source (see
//!   `source_order`), grouped by source kind, so a
//!   FIFO group or a shard applies in its order again.
//! * Only one deployment's letters: a replay over letters kept by several deployments of the
//!   same function (a main writer and a replica) is refused
//!   ([`ReplayError::MixedDeployments`]); name one with
//!   [`DeadLetters::for_deployment`](crate::dead_letter::DeadLetters::for_deployment).
//! * A letter is removed once its record is applied. When removing fails (retried), the letter
//!   is marked `ReplayedAt`, and the next replay removes it without applying it again; when
//!   both fail, the report says so ([`ReplayReport::not_removed`]) and the replay goes on.
//! * A letter whose replay ends in `conflict` stays (it was not applied); an exported letter
//!   (`ExportedAt`) stays unless [`ReplayScope::include_exported`] (its exported event may
//!   have been invoked already).

use std::collections::BTreeSet;

use dynamodb_exactly_once::__private::Backoff;
use dynamodb_exactly_once::{Deadline, Outcome, Protocol, RecordResult, Rejection, StoreError};

use crate::dead_letter::{DeadLetter, DeadLetters, LetterFilter};
use crate::pipeline::AgeCheck;
use crate::source::{Batch, SourceKind, SourceRecord};
use crate::writer::Writer;

/// Tries to remove a replayed letter before it is marked instead.
const REMOVE_RETRIES: Backoff = Backoff::new(
    std::time::Duration::from_millis(50),
    std::time::Duration::from_millis(500),
    3,
);

/// Which letters a replay takes, and how.
#[non_exhaustive]
#[derive(Debug, Clone, Default)]
pub struct ReplayScope {
    /// Which letters (source kind, stream or queue).
    pub filter: LetterFilter,
    /// Apply records however old they are: for an operator who checked that a `too_old`
    /// record cannot undo anything (e.g. its item was never deleted, its key never applied).
    pub force: bool,
    /// Also replay letters an export wrote out.
    pub include_exported: bool,
}

impl ReplayScope {
    /// Every letter of the writer's deployment, age checks on, exported ones left alone.
    pub fn all() -> Self {
        ReplayScope::default()
    }

    /// Only the letters `filter` admits.
    pub fn filter(mut self, filter: LetterFilter) -> Self {
        self.filter = filter;
        self
    }

    /// Apply however old (see [`ReplayScope::force`]).
    pub fn forced(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Also replay exported letters.
    pub fn with_exported(mut self, include: bool) -> Self {
        self.include_exported = include;
        self
    }
}

/// What a dead-letter replay did.
#[non_exhaustive]
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
#[must_use = "letters still rejected, conflicted or not removed are not errors; report them"]
pub struct ReplayReport {
    /// Dead letters whose records now succeeded; they were removed.
    pub replayed: Vec<String>,
    /// Dead letters still rejected, with the current reason; they stay.
    pub still_rejected: Vec<(String, Rejection)>,
    /// Dead letters whose replay ended in `conflict` (not applied); they stay.
    pub conflicted: Vec<String>,
    /// Dead letters that failed transiently or were deferred; they stay, try again.
    pub failed: Vec<String>,
    /// Applied by an earlier replay that could not remove them: removed now, not applied.
    pub removed_applied_earlier: Vec<String>,
    /// Applied now, but neither removed nor marked (the error): delete them before another
    /// replay, or they apply again.
    pub not_removed: Vec<(String, String)>,
    /// Exported letters left alone (see [`ReplayScope::include_exported`]).
    pub exported: Vec<String>,
    /// Letters with missing payload parts: `(id, what is missing)`; left alone.
    pub incomplete: Vec<(String, String)>,
}

/// Why a replay did not start.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Reading the letters failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Letters of several deployments are in scope: replaying them through one deployment's
    /// settings would write one deployment's records into another's table.
    #[error(
        "dead letters of {} deployments are in scope ({}): replay one deployment at a time",
        .0.len(), .0.join(", ")
    )]
    MixedDeployments(Vec<String>),
}

impl<P: Protocol> Writer<P> {
    /// Run every record kept in the dead-letter table `letters` (of this deployment) through
    /// the protocol again (after a producer or configuration fix), in source order. Records
    /// that now succeed are removed from the table; the others stay there, with their latest
    /// reason, whatever sink the writer has. Records older than the protocol applies safely
    /// stay `too_old` unless the scope is forced.
    pub async fn replay_dead_letters(
        &self,
        letters: &DeadLetters,
        scope: &ReplayScope,
    ) -> Result<ReplayReport, ReplayError> {
        let listing = letters.listing(&scope.filter).await?;
        refuse_mixed_deployments(&listing.letters)?;
        let mut report = ReplayReport {
            incomplete: listing.incomplete,
            ..ReplayReport::default()
        };
        let mut pending = Vec::new();
        for letter in listing.letters {
            if letter.replayed_at.is_some() {
                match letters.remove(&letter).await {
                    Ok(()) => report.removed_applied_earlier.push(letter.id),
                    Err(e) => report.not_removed.push((letter.id, e.to_string())),
                }
            } else if letter.exported_at.is_some() && !scope.include_exported {
                report.exported.push(letter.id);
            } else {
                pending.push(letter);
            }
        }
        let ages = if scope.force {
            AgeCheck::Skip
        } else {
            AgeCheck::Enforce
        };
        for kind in SourceKind::ALL {
            let group: Vec<&DeadLetter> =
                pending.iter().filter(|l| l.position.kind == kind).collect();
            if !group.is_empty() {
                self.replay_group(letters, kind, &group, ages, &mut report)
                    .await;
            }
        }
        Ok(report)
    }

    async fn replay_group(
        &self,
        letters: &DeadLetters,
        kind: SourceKind,
        group: &[&DeadLetter],
        ages: AgeCheck,
        report: &mut ReplayReport,
    ) {
        let batch = Batch {
            kind,
            records: group
                .iter()
                .map(|l| SourceRecord {
                    position: l.position.clone(),
                    body: l.payload.clone(),
                })
                .collect(),
        };
        let results = self
            .run_batch(&batch, Deadline::none(), ages, letters)
            .await
            .results;
        for (letter, result) in group.iter().zip(results) {
            let id = letter.id.clone();
            match result {
                RecordResult::Done(outcome) if outcome.label() == "conflict" => {
                    report.conflicted.push(id)
                }
                RecordResult::Done(_) => match remove_or_mark(letters, letter).await {
                    Ok(()) => report.replayed.push(id),
                    Err(e) => report.not_removed.push((id, e)),
                },
                RecordResult::Rejected(reason) => report.still_rejected.push((id, reason)),
                RecordResult::Failed(_) | RecordResult::Deferred => report.failed.push(id),
            }
        }
    }
}

/// Remove an applied letter (retried); failing that, mark it so that no replay applies it
/// again. `Err` only when neither held.
async fn remove_or_mark(letters: &DeadLetters, letter: &DeadLetter) -> Result<(), String> {
    let mut waits = REMOVE_RETRIES.delays();
    let error = loop {
        match letters.remove(letter).await {
            Ok(()) => return Ok(()),
            Err(e) => match waits.next() {
                Some(wait) => tokio::time::sleep(wait).await,
                None => break e,
            },
        }
    };
    tracing::warn!(letter = %letter.id, error = %error, "a replayed letter was not removed");
    letters
        .mark_replayed(letter)
        .await
        .map_err(|mark| format!("not removed ({error}) and not marked ({mark})"))
}

/// Refuse `letters` kept by several deployments ([`ReplayError::MixedDeployments`]): replay,
/// export and forgetting take one deployment's letters at a time (one deployment's records
/// must never reach another's table).
#[doc(hidden)]
pub fn refuse_mixed_deployments(letters: &[DeadLetter]) -> Result<(), ReplayError> {
    let deployments: BTreeSet<String> = letters
        .iter()
        .map(|l| l.deployment.clone().unwrap_or_else(|| "(unnamed)".into()))
        .collect();
    if deployments.len() > 1 {
        return Err(ReplayError::MixedDeployments(
            deployments.into_iter().collect(),
        ));
    }
    Ok(())
}
