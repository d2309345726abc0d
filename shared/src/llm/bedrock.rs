//! Amazon Bedrock Converse (`aws-sdk-bedrockruntime`). The SDK client,
//! with its credential chain, is built on the first call.

use async_trait::async_trait;
pub use aws_sdk_bedrockruntime;
use aws_sdk_bedrockruntime::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_bedrockruntime::types::{
    ContentBlock, ConversationRole, InferenceConfiguration, Message, SystemContentBlock,
};
use tokio::sync::OnceCell;

use super::{ChatModel, ChatRequest, Completion, LlmError, Usage};

/// Region used when neither the configuration nor the environment names one.
const DEFAULT_REGION: &str = "us-east-1";

/// The client. Cheap to construct.
#[derive(Debug)]
pub struct BedrockChat {
    id: String,
    model_id: String,
    region: Option<String>,
    endpoint_url: Option<String>,
    client: OnceCell<aws_sdk_bedrockruntime::Client>,
}

impl BedrockChat {
    /// A client for `model_id`; credentials and (without `region`) the
    /// region come from the environment on the first call.
    #[must_use]
    pub fn new(model_id: &str, region: Option<String>, endpoint_url: Option<String>) -> Self {
        Self {
            id: format!("bedrock:{model_id}"),
            model_id: model_id.to_owned(),
            region,
            endpoint_url,
            client: OnceCell::new(),
        }
    }

    /// A client over an explicit SDK configuration (tests, tools).
    #[must_use]
    pub fn with_config(model_id: &str, config: aws_sdk_bedrockruntime::Config) -> Self {
        Self {
            id: format!("bedrock:{model_id}"),
            model_id: model_id.to_owned(),
            region: None,
            endpoint_url: None,
            client: OnceCell::from(aws_sdk_bedrockruntime::Client::from_conf(config)),
        }
    }

    async fn client(&self) -> &aws_sdk_bedrockruntime::Client {
        self.client
            .get_or_init(|| async {
                use aws_config::meta::region::RegionProviderChain;
                use aws_sdk_bedrockruntime::config::Region;
                let region = RegionProviderChain::first_try(self.region.clone().map(Region::new))
                    .or_default_provider()
                    .or_else(Region::from_static(DEFAULT_REGION));
                let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).region(region);
                if let Some(url) = &self.endpoint_url {
                    loader = loader.endpoint_url(url);
                }
                aws_sdk_bedrockruntime::Client::new(&loader.load().await)
            })
            .await
    }

    fn fail<E: ProvideErrorMetadata + std::error::Error + 'static>(
        &self,
        error: &SdkError<E, aws_sdk_bedrockruntime::config::http::HttpResponse>,
    ) -> LlmError {
        match error {
            SdkError::ServiceError(service) => LlmError::Status {
                model: self.id.clone(),
                status: service.raw().status().as_u16(),
                message: format!(
                    "{}: {}",
                    service.err().code().unwrap_or("error"),
                    service.err().message().unwrap_or("no message")
                ),
            },
            SdkError::ResponseError(_) => {
                LlmError::Malformed { model: self.id.clone(), message: DisplayErrorContext(error).to_string() }
            }
            other => LlmError::Transport { model: self.id.clone(), message: DisplayErrorContext(other).to_string() },
        }
    }
}

#[async_trait]
impl ChatModel for BedrockChat {
    fn id(&self) -> &str {
        &self.id
    }

    async fn complete(&self, request: &ChatRequest<'_>) -> Result<Completion, LlmError> {
        let message = Message::builder()
            .role(ConversationRole::User)
            .content(ContentBlock::Text(request.user.to_owned()))
            .build()
            .map_err(|e| LlmError::Config { model: self.id.clone(), message: e.to_string() })?;
        let inference = InferenceConfiguration::builder()
            .max_tokens(i32::try_from(request.max_tokens).unwrap_or(i32::MAX))
            .temperature(0.0)
            .build();
        let output = self
            .client()
            .await
            .converse()
            .model_id(&self.model_id)
            .system(SystemContentBlock::Text(request.system.to_owned()))
            .messages(message)
            .inference_config(inference)
            .send()
            .await
            .map_err(|e| self.fail(&e))?;
        let text: String = output
            .output()
            .and_then(|o| o.as_message().ok())
            .map(|m| m.content().iter().filter_map(|c| c.as_text().ok()).map(String::as_str).collect())
            .ok_or_else(|| LlmError::Malformed { model: self.id.clone(), message: "no output message".into() })?;
        let usage = output.usage().map(|u| Usage {
            prompt_tokens: u64::try_from(u.input_tokens()).unwrap_or(0),
            completion_tokens: u64::try_from(u.output_tokens()).unwrap_or(0),
        });
        Ok(Completion { text, usage })
    }
}
