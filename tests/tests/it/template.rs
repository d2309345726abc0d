//! `infra/template.yaml` through AWS SAM's own translator
//! (`tests/template_check.py`): it translates in both identity modes, with
//! and without the S3 Vectors bucket; every route but `GET /health` is
//! behind the JWT authorizer in `jwt` mode and none is in `api_key` mode,
//! no function holds an API key in its environment, and only the functions
//! that call a model get the model access policy and the key secrets' ARNs.
//! The vector bucket exists only with `VectorBucket=Enabled`; every
//! function gets `SKALD_INDEX_BACKEND` and `SKALD_VECTOR_BUCKET` (the
//! bucket's name, else empty); each function's `s3vectors` actions are
//! exactly its own list (the readers `QueryVectors` and `GetVectors`, the
//! indexer also `PutVectors`, `DeleteVectors`, `GetIndex` and
//! `CreateIndex`, sessions none), on the accounts' indexes
//! (`…/bucket/<name>/index/skald-*`) only; and the template's rules refuse
//! `IndexBackend=s3vectors` without the bucket.
//!
//! The translator is the Python package `samtranslator` (installed with
//! cfn-lint, which `scripts/test.sh` runs on the same template). Without it
//! this test says so on stderr and passes: the route-level part is also
//! checked, by a line scanner, in `tests/tests/it/openapi.rs`.

use std::process::Command;

#[test]
fn the_template_translates_with_the_routes_and_roles_each_deployment_needs() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/template_check.py");
    let output =
        Command::new("python3").arg(script).output().unwrap_or_else(|e| panic!("cannot run python3 {script}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    match output.status.code() {
        Some(0) => assert!(stdout.contains("checks passed"), "{stdout}"),
        Some(2) => eprintln!("skipped: {}", stderr.trim()),
        _ => panic!("{script} failed:\n{stdout}\n{stderr}"),
    }
}

/// The template's `Embedder` parameter reaches every function
/// (`SKALD_EMBEDDER`), so every binary built with USE-m3 must have e5 too:
/// one without it would fail its init under `use-m3+e5`.
#[test]
fn every_binary_with_use_m3_has_e5_for_the_fused_embedder() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut manifests: Vec<std::path::PathBuf> = std::fs::read_dir(repo.join("functions"))
        .expect("functions/")
        .filter_map(|e| e.ok().map(|e| e.path().join("Cargo.toml")))
        .filter(|p| p.exists())
        .collect();
    manifests.extend([repo.join("mcp/Cargo.toml"), repo.join("cli/Cargo.toml")]);
    let mut missing = Vec::new();
    for manifest in &manifests {
        let text = std::fs::read_to_string(manifest).expect("manifest");
        let skald = text.lines().find(|l| l.starts_with("skald = ")).unwrap_or_default();
        if skald.contains("\"use-m3\"") && !skald.contains("\"e5\"") {
            missing.push(manifest.display().to_string());
        }
    }
    assert!(manifests.len() >= 10, "found {} manifests", manifests.len());
    assert!(missing.is_empty(), "built with use-m3 but not e5: {missing:?}");
}
