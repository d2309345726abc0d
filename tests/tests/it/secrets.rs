//! The chat models' API keys from AWS Secrets Manager (feature `secrets`),
//! against the local moto server the S3 suites use (it serves Secrets
//! Manager on the same endpoint): secrets created over HTTP are resolved
//! into the model settings, the resolved key is the one the chat client
//! sends, and a secret that cannot be read is an error naming the setting
//! and the secret, never a value.

use std::sync::atomic::{AtomicU64, Ordering};

use skald::config::{Config, ModelConfig};
use skald::llm::ChatRequest;
use skald::secrets::aws_sdk_secretsmanager::config::{BehaviorVersion, Credentials, Region};
use skald::secrets::aws_sdk_secretsmanager::{Client, Config as ClientConfig};
use skald::secrets::{pending, resolve_model_keys, resolve_model_keys_with};
use skald_tests::model_server::{ModelServer, Reply, UNSET_KEY_ENV};

/// A Secrets Manager client of the server at `endpoint`, with the static
/// credentials and region the S3 suites use.
fn client_at(endpoint: &str) -> Client {
    let config = ClientConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .credentials_provider(Credentials::new("test", "test", None, None, "static"))
        .region(Region::from_static("us-east-1"))
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(config)
}

/// The local moto server's Secrets Manager.
fn moto() -> Client {
    client_at(&skald_tests::moto::endpoint())
}

/// Creates a secret with a name unique to this process and `stem`, holding
/// `value`; returns its ARN and its name.
async fn create_secret(client: &Client, stem: &str, value: &str) -> (String, String) {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = format!("skald-test/{stem}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let created = client
        .create_secret()
        .name(&name)
        .secret_string(value)
        .send()
        .await
        .unwrap_or_else(|e| panic!("cannot create secret {name}: {e:?}"));
    let arn = created.arn().unwrap_or_else(|| panic!("moto returned no ARN for {name}")).to_owned();
    (arn, name)
}

/// An OpenAI-compatible model at `base_url` whose key is in `secret`.
fn model(base_url: &str, secret: Option<&str>) -> ModelConfig {
    ModelConfig::Openai {
        base_url: base_url.to_owned(),
        model: "m".into(),
        api_key_env: UNSET_KEY_ENV.into(),
        api_key_secret: secret.map(str::to_owned),
        api_key: None,
    }
}

/// The resolved key of `model`, if any.
fn key(model: Option<&ModelConfig>) -> Option<String> {
    match model {
        Some(ModelConfig::Openai { api_key: Some(key), .. }) => Some(key.expose().to_owned()),
        _ => None,
    }
}

#[tokio::test]
async fn secrets_by_arn_and_by_name_are_resolved_into_the_models_and_sent_as_their_key() {
    let client = moto();
    let (main_arn, _) = create_secret(&client, "llm", "  sk-main-0001\n").await;
    let (_, planner_name) = create_secret(&client, "planner", r#"{"OPENAI_API_KEY": "sk-planner-0002"}"#).await;
    let server = ModelServer::start().await;
    server.set_default(Reply::Text("ok".into()));

    let mut config = Config {
        llm: Some(model(&server.base_url(), Some(&main_arn))),
        query_planner: Some(model(&server.base_url(), Some(&planner_name))),
        ..Config::default()
    };
    assert!(pending(&config));
    resolve_model_keys_with(&mut config, &client).await.expect("both secrets resolve");
    assert_eq!(key(config.llm.as_ref()).as_deref(), Some("sk-main-0001"), "plain text, trimmed");
    assert_eq!(key(config.query_planner.as_ref()).as_deref(), Some("sk-planner-0002"), "the one JSON member");
    assert!(!pending(&config), "nothing left to resolve");
    let shown = format!("{config:?}");
    assert!(!shown.contains("sk-main") && !shown.contains("sk-planner"), "Debug never shows a key: {shown}");

    // The chat client sends the resolved key, not the (unset) variable.
    let llm = config.llm.as_ref().expect("a main model");
    let request = ChatRequest { system: "s", user: "u", json: false, max_tokens: 8 };
    skald::llm::client(llm).complete(&request).await.expect("the stand-in answers");
    let sent = server.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].header("authorization"), Some("Bearer sk-main-0001"));
}

#[tokio::test]
async fn a_missing_or_unusable_secret_is_an_error_naming_the_setting_and_the_secret() {
    let client = moto();
    let missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:skald-test/absent-AbCdEf";
    let mut config = Config { query_planner: Some(model("http://127.0.0.1:9/v1", Some(missing))), ..Config::default() };
    let err = resolve_model_keys_with(&mut config, &client).await.expect_err("no such secret");
    let message = err.to_string();
    assert!(message.contains("query_planner.api_key_secret (SKALD_QUERY_PLANNER_API_KEY_SECRET)"), "{message}");
    assert!(message.contains(missing), "{message}");
    assert!(message.contains("ResourceNotFoundException: "), "the service's code and message: {message}");
    assert!(message.len() < 400, "no raw response in the message: {message}");
    assert_eq!(key(config.query_planner.as_ref()), None);

    let (two_members, _) = create_secret(&client, "two", r#"{"a": "sk-aaaa", "b": "sk-bbbb"}"#).await;
    let mut config = Config { llm: Some(model("http://127.0.0.1:9/v1", Some(&two_members))), ..Config::default() };
    let err = resolve_model_keys_with(&mut config, &client).await.expect_err("no single key");
    let message = err.to_string();
    assert!(message.contains("llm.api_key_secret (SKALD_LLM_API_KEY_SECRET)"), "{message}");
    assert!(message.contains("exactly one member"), "{message}");
    assert!(!message.contains("sk-aaaa") && !message.contains("sk-bbbb"), "no value in the error: {message}");
}

#[tokio::test]
async fn models_that_name_no_secret_cost_no_call() {
    // Nothing listens on port 9 of loopback: any call would fail.
    let dead = client_at("http://127.0.0.1:9");
    let bedrock = ModelConfig::Bedrock { model_id: "anthropic.haiku".into(), region: None, endpoint_url: None };
    let mut config =
        Config { llm: Some(model("http://127.0.0.1:9/v1", None)), query_planner: Some(bedrock), ..Config::default() };
    assert!(!pending(&config));
    resolve_model_keys_with(&mut config, &dead).await.expect("no secret, no call");
    resolve_model_keys(&mut config).await.expect("no AWS configuration is even loaded");
    assert_eq!(key(config.llm.as_ref()), None);
    let mut none = Config::default();
    resolve_model_keys(&mut none).await.expect("no model at all");
}
