//! Self-test of `skald_tests::model_server` through a raw HTTP/1.1 client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skald_tests::model_server::{ModelServer, Reply, USAGE_COMPLETION, USAGE_PROMPT};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// A parsed response: status, headers (lowercase names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

/// POSTs `body` to `path` with `Connection: close` and reads the whole response.
async fn post(addr: SocketAddr, path: &str, body: &str) -> Answer {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-Test: yes\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write the request");
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.expect("read the response");
    let text = String::from_utf8(bytes).expect("a UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer { status, headers, body: body.to_owned() }
}

fn chat(model: &str, system: &str, user: &str) -> String {
    json!({"model": model, "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]})
        .to_string()
}

fn content(answer: &Answer) -> String {
    answer.json()["choices"][0]["message"]["content"].as_str().expect("assistant content").to_owned()
}

#[tokio::test]
async fn openai_text_reply_has_the_shape_usage_and_model() {
    let server = ModelServer::start().await;
    server.set_default(Reply::Text("hello there".into()));
    let answer = post(server.addr(), "/v1/chat/completions", &chat("gpt-test", "sys", "hi")).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let value = answer.json();
    assert_eq!(value["object"], "chat.completion");
    assert_eq!(value["model"], "gpt-test");
    assert!(value["id"].as_str().expect("an id").starts_with("chatcmpl-stub-"));
    assert_eq!(value["choices"][0]["finish_reason"], "stop");
    assert_eq!(content(&answer), "hello there");
    assert_eq!(value["usage"]["prompt_tokens"], USAGE_PROMPT);
    assert_eq!(value["usage"]["completion_tokens"], USAGE_COMPLETION);
    assert_eq!(value["usage"]["total_tokens"], USAGE_PROMPT + USAGE_COMPLETION);

    server.set_default(Reply::TextNoUsage("bare".into()));
    let answer = post(server.addr(), "/chat/completions", &chat("m", "s", "u")).await;
    assert_eq!(content(&answer), "bare");
    assert!(answer.json().get("usage").is_none());
}

#[tokio::test]
async fn rules_pick_status_and_raw_replies() {
    let server = ModelServer::start().await;
    server.on("throttle-me", Reply::Status(429));
    server.on("raw-please", Reply::Raw("{not json".into()));
    let answer = post(server.addr(), "/v1/chat/completions", &chat("m", "s", "throttle-me")).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert_eq!(answer.json()["error"]["message"], "stub error 429");
    let answer = post(server.addr(), "/v1/chat/completions", &chat("m", "s", "raw-please")).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "{not json"));
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(post(server.addr(), "/v1/embeddings", "{}").await.status, 404);
}

#[tokio::test]
async fn echo_condenses_memory_elements_into_cited_bullets() {
    let server = ModelServer::start().await;
    let block = "<memory uri=\"viking://user/a/memories/events/x.md\" type=\"events\" score=\"0.72\" detail=\"full\">\n\
                 # Summary\n\nShipped &lt;v2&gt; &amp; celebrated\nmore\n</memory>\n\
                 <memory uri=\"viking://resources/a&amp;b\" type=\"resources\" score=\"0.51\" detail=\"uri\"/>\n\
                 <memory uri=\"viking://user/a/memories/third.md\" type=\"events\" score=\"0.40\" detail=\"full\">\n\
                 third\n</memory>";
    let user = format!("Question: what shipped?\nWrite at most 2 bullets.\n\n{block}");
    let system = "You condense retrieved memory into bullets.";
    let answer = post(server.addr(), "/v1/chat/completions", &chat("m", system, &user)).await;
    assert_eq!(
        content(&answer),
        "- Shipped <v2> & celebrated (source: viking://user/a/memories/events/x.md)\n\
         - see viking://resources/a&b (source: viking://resources/a&b)"
    );
    let answer = post(server.addr(), "/v1/chat/completions", &chat("m", system, "nothing here")).await;
    assert_eq!(content(&answer), "NO_RELEVANT_MEMORY");
}

#[tokio::test]
async fn echo_expands_the_latest_user_line_and_echoes_otherwise() {
    let server = ModelServer::start().await;
    let user = "Session:\n[user]: first question\n[assistant]: an answer\n[user]:   deploy the staging cluster  \nend";
    let answer = post(server.addr(), "/v1/chat/completions", &chat("m", "You plan search queries.", user)).await;
    let plan: Value = serde_json::from_str(&content(&answer)).expect("a JSON plan");
    assert_eq!(plan["queries"][0]["query"], "deploy the staging cluster");
    assert_eq!(plan["queries"][0]["context_type"], "memory");
    assert_eq!(plan["queries"][0]["priority"], 2);
    let answer = post(server.addr(), "/v1/chat/completions", &chat("m", "You plan search queries.", "none")).await;
    assert_eq!(content(&answer), r#"{"reasoning":"no session context","queries":[]}"#);
    let answer = post(server.addr(), "/v1/chat/completions", &chat("m", "Be nice.", "ping")).await;
    assert_eq!(content(&answer), "echo: ping");
}

#[tokio::test]
async fn bedrock_converse_has_its_shape_and_errors() {
    let server = ModelServer::start().await;
    server.on("fail", Reply::Status(400));
    let path = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse";
    let body = json!({
        "messages": [{"role": "user", "content": [{"text": "hello bedrock"}]}],
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {"maxTokens": 100, "temperature": 0.0},
    });
    let answer = post(server.addr(), path, &body.to_string()).await;
    assert_eq!(answer.status, 200);
    let value = answer.json();
    assert_eq!(value["output"]["message"]["content"][0]["text"], "echo: hello bedrock");
    assert_eq!(value["stopReason"], "end_turn");
    assert_eq!(value["usage"]["inputTokens"], USAGE_PROMPT);
    assert_eq!(value["usage"]["totalTokens"], USAGE_PROMPT + USAGE_COMPLETION);
    let recorded = server.requests();
    assert_eq!(recorded[0].prompt_text(), "Be brief.\nhello bedrock");
    assert_eq!(recorded[0].path, path);

    let answer = post(server.addr(), path, r#"{"messages":[{"role":"user","content":[{"text":"fail"}]}]}"#).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.header("x-amzn-errortype"), Some("ValidationException"));
    assert_eq!(answer.json()["message"], "stub error 400");
}

#[tokio::test]
async fn delay_delays() {
    let server = ModelServer::start().await;
    server.set_default(Reply::Delay(Duration::from_millis(300), Box::new(Reply::Text("late".into()))));
    let started = Instant::now();
    let answer = post(server.addr(), "/v1/chat/completions", &chat("m", "s", "u")).await;
    assert!(started.elapsed() >= Duration::from_millis(300), "answered after {:?}", started.elapsed());
    assert_eq!(content(&answer), "late");
}

#[tokio::test]
async fn records_requests_and_counts_silent_connections() {
    let server = ModelServer::start().await;
    assert_eq!(server.connections(), 0);
    let body = chat("m", "sys", "recorded text");
    post(server.addr(), "/v1/chat/completions", &body).await;
    let recorded = server.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!((recorded[0].method.as_str(), recorded[0].raw.as_str()), ("POST", body.as_str()));
    assert_eq!(recorded[0].body["messages"][1]["content"], "recorded text");
    assert_eq!(recorded[0].header("X-TEST"), Some("yes"));
    assert_eq!(recorded[0].prompt_text(), "sys\nrecorded text");

    let _silent = TcpStream::connect(server.addr()).await.expect("connect");
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.connections() < 2 {
        assert!(Instant::now() < deadline, "the silent connection was not counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.requests().len(), 1);
}
