//! Change notifications for a local directory store, which sends none:
//! `skald watch` (started by `scripts/run-local.sh`) polls the store's
//! files and hands every change to the code S3's notifications reach when
//! deployed — a file of a tree to [`crate::indexer::apply`], a commit's
//! task to [`crate::memory::extractor::run_task`] — so a file written into
//! `.skald/store` by hand, or by any tool, is searchable within a poll.
//!
//! [`changed`] is pure (two listings in, the keys that differ out); only
//! [`scan`] reads the disk and [`notify`] calls the store and the index.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use crate::app::App;
use crate::indexer::{Change, IndexerReport};

/// What a scan saw of one file: when it last changed and its size.
pub type Seen = (SystemTime, u64);

/// A listing of the store's watched files by key.
pub type Snapshot = BTreeMap<String, Seen>;

/// Whether `key` is one a notification rule names: a Markdown file of an
/// account's tree outside its sessions, or a commit's task.
#[must_use]
pub fn watched(key: &str) -> bool {
    let mut parts = key.splitn(4, '/');
    let (Some("accounts"), Some(_), Some(kind), Some(rest)) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    match kind {
        "tree" => rest.ends_with(".md") && !rest.split('/').any(|s| s == "sessions"),
        "tasks" => rest.ends_with(crate::memory::tasks::TASK_SUFFIX),
        _ => false,
    }
}

/// The watched files under `root` (a local store's directory), by key.
/// Unreadable entries are skipped; a missing `accounts/` is an empty
/// listing.
///
/// Cost: one directory walk of `accounts/*/tree` (sessions left out) and
/// `accounts/*/tasks`.
#[must_use]
pub fn scan(root: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    let mut stack = vec![root.join("accounts")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let Some(key) = path.strip_prefix(root).ok().and_then(|p| p.to_str()).map(|k| k.replace('\\', "/")) else {
                continue;
            };
            if meta.is_dir() {
                if !key.ends_with("/sessions") && !key.ends_with("/index") {
                    stack.push(path);
                }
            } else if watched(&key) {
                out.insert(key, (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len()));
            }
        }
    }
    out
}

/// The keys that were added, changed (time or size) or removed between
/// `before` and `after`, in key order.
#[must_use]
pub fn changed(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut keys: Vec<String> = after
        .iter()
        .filter(|(key, seen)| before.get(*key) != Some(seen))
        .map(|(key, _)| key.clone())
        .chain(before.keys().filter(|key| !after.contains_key(*key)).cloned())
        .collect();
    keys.sort();
    keys
}

/// What one [`notify`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Notified {
    /// The indexer's totals for the tree's files.
    pub index: IndexerReport,
    /// Commit tasks run (the others were done, or not found).
    pub tasks_run: usize,
    /// What failed, one line each (the next poll does not retry it; a
    /// later change of the file does).
    pub errors: Vec<String>,
}

/// Hands `keys` (relative to the store's root) to the indexer and the
/// extractor, as their notifications would, at `now` (Unix seconds).
///
/// Cost: [`crate::indexer::apply`] over the tree's keys; one
/// [`crate::memory::extractor::run_task`] per task key.
pub async fn notify(app: &App, keys: &[String], now: i64) -> Notified {
    let mut done = Notified::default();
    let (tasks, files): (Vec<&String>, Vec<&String>) =
        keys.iter().partition(|k| k.ends_with(crate::memory::tasks::TASK_SUFFIX));
    if !files.is_empty() {
        let changes: Vec<Change> =
            files.iter().map(|key| Change { key: (*key).clone(), at: now, version: None }).collect();
        match crate::indexer::apply(app, &changes).await {
            Ok(report) => done.index = report,
            Err(e) => {
                done.errors.push(e.to_string());
                done.index = e.report;
            }
        }
    }
    run_tasks(app, &tasks, &mut done).await;
    done
}

#[cfg(feature = "llm")]
async fn run_tasks(app: &App, keys: &[&String], done: &mut Notified) {
    for key in keys {
        let deadline = crate::deadline::Deadline {
            at: std::time::Instant::now() + TASK_TIME,
            source: crate::deadline::DeadlineSource::Gateway,
        };
        match crate::memory::extractor::run_task_at(app, key, &deadline).await {
            Ok(Some(run)) if run.ran => done.tasks_run += 1,
            Ok(_) => {}
            Err(e) => done.errors.push(format!("task {key}: {e}")),
        }
    }
}

/// The time one task run gets (as an invocation of the `extractor`
/// function without a deadline of its own).
#[cfg(feature = "llm")]
const TASK_TIME: std::time::Duration = std::time::Duration::from_secs(120);

#[cfg(not(feature = "llm"))]
async fn run_tasks(_app: &App, _keys: &[&String], _done: &mut Notified) {}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn watched_keys_are_tree_markdown_and_tasks() {
        let table = [
            ("accounts/a/tree/resources/x.md", true),
            ("accounts/a/tree/user/u/memories/events/2026/01/01/s-001-01.md", true),
            ("accounts/a/tree/user/u/sessions/s/history/archive_001/.overview.md", false),
            ("accounts/a/tree/resources/x.pdf", false),
            ("accounts/a/tasks/u/0123456789abcdef0123456789abcdef.task.json", true),
            ("accounts/a/index/manifest.json", false),
            ("skald/keys/k.json", false),
        ];
        for (key, want) in table {
            assert_eq!(watched(key), want, "{key}");
        }
    }

    #[test]
    fn changes_are_what_was_added_changed_or_removed() {
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let before: Snapshot =
            [("a".to_owned(), (t(1), 10)), ("b".to_owned(), (t(1), 10)), ("c".to_owned(), (t(1), 10))].into();
        let after: Snapshot =
            [("a".to_owned(), (t(1), 10)), ("b".to_owned(), (t(2), 10)), ("d".to_owned(), (t(1), 3))].into();
        assert_eq!(changed(&before, &after), ["b", "c", "d"]);
        assert!(changed(&after, &after).is_empty());
    }
}
