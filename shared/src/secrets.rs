//! The models' API keys (the chat models' and the reranker's) from AWS
//! Secrets Manager (feature `secrets`), read once at init by [`crate::app::App::new`] and handed to the model
//! settings in memory (`api_key` of [`ModelConfig::Openai`]): a deployed
//! function never holds a key in its environment.
//!
//! Cost: nothing unless a configured OpenAI-compatible model names a
//! secret (`api_key_secret`, set by `SKALD_LLM_API_KEY_SECRET` /
//! `SKALD_QUERY_PLANNER_API_KEY_SECRET`, `SKALD_EXTRACTION_…`,
//! `SKALD_RERANK_…`); then one AWS configuration load
//! and one `GetSecretValue` call per distinct secret, at init. A secret
//! that cannot be read fails init ([`SecretError`]), so a function never
//! starts with a model it cannot call.
//!
//! A secret's value is the key as plain text (surrounding whitespace
//! dropped), or a JSON object with exactly one member whose value is a
//! string (what the console's key/value editor writes). A secret named by
//! its ARN is read in the ARN's region; by name, in the function's region.
//! `AWS_ENDPOINT_URL_SECRETS_MANAGER` points the client elsewhere (a local
//! stand-in).

use std::collections::BTreeMap;

pub use aws_sdk_secretsmanager;
use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::config::Region;
use aws_sdk_secretsmanager::error::{DisplayErrorContext, ProvideErrorMetadata as _};

use crate::config::{Config, ModelConfig, Secret};

/// A secret that could not be resolved. The message names the setting (and
/// the environment variable that sets it) and the secret's id, never its
/// value.
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve {setting} {secret_id:?}: {reason}")]
pub struct SecretError {
    /// The setting and its variable, e.g. `llm.api_key_secret
    /// (SKALD_LLM_API_KEY_SECRET)`.
    pub setting: String,
    /// The secret's ARN or name as configured.
    pub secret_id: String,
    /// What failed: the service's error, or what is wrong with the value.
    pub reason: String,
}

/// Whether any configured model names a secret still to be resolved
/// (without it, [`resolve_model_keys`] builds no client and makes no call).
#[must_use]
pub fn pending(config: &Config) -> bool {
    [&config.llm, &config.query_planner, &config.extraction, &config.rerank]
        .into_iter()
        .any(|model| matches!(model, Some(ModelConfig::Openai { api_key_secret: Some(_), api_key: None, .. })))
}

/// Resolves every model's `api_key_secret` with a Secrets Manager client
/// built from the default AWS configuration (the function's region and
/// role). Does nothing, and builds no client, when [`pending`] is false.
///
/// # Errors
/// [`SecretError`] for the first secret that cannot be read or holds no
/// usable key.
pub async fn resolve_model_keys(config: &mut Config) -> Result<(), SecretError> {
    if !pending(config) {
        return Ok(());
    }
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
    resolve_model_keys_with(config, &Client::new(&sdk)).await
}

/// [`resolve_model_keys`] with a given client (tests, a local stand-in).
/// Each distinct secret is read once, even when both models name it.
///
/// # Errors
/// [`SecretError`] for the first secret that cannot be read or holds no
/// usable key.
pub async fn resolve_model_keys_with(config: &mut Config, client: &Client) -> Result<(), SecretError> {
    let mut read: BTreeMap<String, Secret> = BTreeMap::new();
    for (model, prefix, key) in [
        (&mut config.llm, "SKALD_LLM", "llm"),
        (&mut config.query_planner, "SKALD_QUERY_PLANNER", "query_planner"),
        (&mut config.extraction, "SKALD_EXTRACTION", "extraction"),
        (&mut config.rerank, "SKALD_RERANK", "rerank"),
    ] {
        let Some(ModelConfig::Openai { api_key_secret: Some(secret_id), api_key, .. }) = model else { continue };
        if api_key.is_some() {
            continue;
        }
        let value = match read.get(secret_id.as_str()) {
            Some(value) => value.clone(),
            None => {
                let value = fetch(client, secret_id).await.map_err(|reason| SecretError {
                    setting: format!("{key}.api_key_secret ({prefix}_API_KEY_SECRET)"),
                    secret_id: secret_id.clone(),
                    reason,
                })?;
                read.insert(secret_id.clone(), value.clone());
                value
            }
        };
        *api_key = Some(value);
    }
    Ok(())
}

/// The key `secret_id` holds, or why it cannot be had.
async fn fetch(client: &Client, secret_id: &str) -> Result<Secret, String> {
    let mut call = client.get_secret_value().secret_id(secret_id).customize();
    if let Some(region) = arn_region(secret_id) {
        call = call.config_override(aws_sdk_secretsmanager::config::Builder::default().region(Region::new(region)));
    }
    // A service error by its code and message (the full context would
    // carry the raw response); anything else (no connection, no
    // credentials) with its chain of causes.
    let output = call.send().await.map_err(|e| match e.code() {
        Some(code) => format!("{code}: {}", e.message().unwrap_or("no message")),
        None => DisplayErrorContext(e).to_string(),
    })?;
    let Some(text) = output.secret_string() else {
        return Err("the secret has no string value (a binary secret?)".to_owned());
    };
    key_of(text).map(Secret::new)
}

/// The region of a Secrets Manager ARN (`arn:{partition}:secretsmanager:
/// {region}:{account}:secret:{name}`); `None` for a name.
fn arn_region(secret_id: &str) -> Option<String> {
    let mut parts = secret_id.splitn(6, ':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("arn"), Some(_), Some("secretsmanager"), Some(region)) if !region.is_empty() => Some(region.to_owned()),
        _ => None,
    }
}

/// The API key in a secret's text: the text itself, trimmed, or the one
/// string member of a JSON object. The error never quotes the text.
fn key_of(text: &str) -> Result<String, String> {
    let trimmed = text.trim();
    let key = if trimmed.starts_with('{') {
        let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(trimmed)
            .map_err(|e| format!("the secret starts with '{{' but is not a JSON object (line {})", e.line()))?;
        let mut members = object.into_iter();
        match (members.next(), members.next()) {
            (Some((_, serde_json::Value::String(key))), None) => key.trim().to_owned(),
            (Some((name, _)), None) => return Err(format!("the secret's member {name:?} is not a string")),
            _ => {
                return Err(
                    "the secret is a JSON object without exactly one member; store the key as plain text".to_owned()
                );
            }
        }
    } else {
        trimmed.to_owned()
    };
    if key.is_empty() {
        return Err("the secret is empty".to_owned());
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_the_plain_text_or_the_one_member_of_an_object() {
        assert_eq!(key_of("  sk-abc\n"), Ok("sk-abc".to_owned()));
        assert_eq!(key_of(r#"{"OPENAI_API_KEY": "sk-abc"}"#), Ok("sk-abc".to_owned()));
        for (bad, says) in [
            ("", "empty"),
            ("  \n", "empty"),
            (r#"{"a": "x", "b": "y"}"#, "exactly one member"),
            ("{}", "exactly one member"),
            (r#"{"n": 1}"#, "member \"n\" is not a string"),
            (r#"{"k": "sk-abc""#, "not a JSON object"),
            (r#"{"k": "  "}"#, "empty"),
        ] {
            let err = key_of(bad).expect_err(bad);
            assert!(err.contains(says), "{bad:?}: {err}");
            assert!(!err.contains("sk-abc"), "the error quotes no value: {err}");
        }
    }

    #[test]
    fn an_arn_names_its_region_and_a_name_none() {
        let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:skald/llm-AbCdEf";
        assert_eq!(arn_region(arn).as_deref(), Some("eu-west-1"));
        assert_eq!(arn_region("skald/llm"), None);
        assert_eq!(arn_region("arn:aws:ssm:eu-west-1:123456789012:parameter/x"), None);
    }
}
