//! [`Client`]: a running node's admin API over HTTP, and the [`Directory`] it reads.

use super::{
    ApiError, BoxFuture, ClientError, Directory, Duration, Found, Path, Peers, PublishRequest,
    Published, Token, UnpublishRequest, Unpublished, Value, MAX_RESPONSE,
};

/// A client of a running node's admin API.
#[derive(Debug, Clone)]
pub struct Client {
    base: url::Url,
    http: reqwest::Client,
    token: Token,
}

impl Client {
    /// A client of the admin API at `base` (`http://127.0.0.1:PORT`) with credential `token`.
    pub fn new(base: &str, token: Token, timeout: Duration) -> Result<Self, ClientError> {
        let bad = |reason: String| ClientError::BadUrl {
            url: base.to_owned(),
            reason,
        };
        let base = url::Url::parse(base).map_err(|e| bad(format!("is not a URL: {e}")))?;
        if base.scheme() != "http" && base.scheme() != "https" {
            return Err(bad("must be http or https".into()));
        }
        let http = agentnet_did::http::client_builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(5))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|source| ClientError::Transport {
                url: base.to_string(),
                source,
            })?;
        Ok(Self { base, http, token })
    }

    /// The client of the node recorded in `<data-dir>/node.json`, with the token of
    /// `<data-dir>/admin.token`.
    pub fn from_data_dir(dir: &Path, timeout: Duration) -> Result<Self, ClientError> {
        let not_running = || ClientError::NotRunning(dir.display().to_string());
        let info = crate::data_dir::NodeFile::read(dir).map_err(|_| not_running())?;
        let token = Token::read(dir)?;
        Self::new(&format!("http://{}", info.admin), token, timeout)
    }

    /// The node's URL.
    pub fn base(&self) -> &url::Url {
        &self.base
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let url = self.base.to_string();
        let transport = |source: reqwest::Error| ClientError::Transport {
            url: url.clone(),
            source,
        };
        let mut resp = req
            .bearer_auth(self.token.as_str())
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    ClientError::NotRunning(url.clone())
                } else {
                    transport(e)
                }
            })?;
        let status = resp.status();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(transport)? {
            if body.len() + chunk.len() > MAX_RESPONSE {
                return Err(ClientError::TooLarge {
                    url,
                    limit: MAX_RESPONSE,
                });
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let (reason, error) = match serde_json::from_slice::<ApiError>(&body) {
                Ok(e) => (e.reason, e.error),
                Err(_) => (
                    String::new(),
                    format!(
                        "HTTP {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(200)])
                    ),
                ),
            };
            return Err(ClientError::Refused {
                status: status.as_u16(),
                reason,
                error,
            });
        }
        serde_json::from_slice(&body).map_err(|source| ClientError::Unreadable { url, source })
    }

    fn url(&self, path: &str) -> url::Url {
        let mut u = self.base.clone();
        u.set_path(path);
        u
    }

    /// `POST /admin/v1/publish`.
    pub async fn publish(&self, req: &PublishRequest) -> Result<Published, ClientError> {
        self.send(self.http.post(self.url("/admin/v1/publish")).json(req))
            .await
    }

    /// `POST /admin/v1/unpublish`.
    pub async fn unpublish(&self, did: &str) -> Result<Unpublished, ClientError> {
        let req = UnpublishRequest {
            did: did.to_owned(),
        };
        self.send(self.http.post(self.url("/admin/v1/unpublish")).json(&req))
            .await
    }

    /// `POST /admin/v1/endorse`.
    pub async fn endorse(
        &self,
        body: &super::EndorseBody,
    ) -> Result<super::EndorsementView, ClientError> {
        self.send(self.http.post(self.url("/admin/v1/endorse")).json(body))
            .await
    }

    /// `GET /admin/v1/endorsements[?did=DID]`.
    pub async fn endorsements(
        &self,
        did: Option<&str>,
    ) -> Result<Vec<super::EndorsementView>, ClientError> {
        let mut u = self.url("/admin/v1/endorsements");
        if let Some(d) = did {
            u.query_pairs_mut().append_pair("did", d);
        }
        self.send(self.http.get(u)).await
    }

    /// `POST /admin/v1/trust/accept`: accept `did`'s live card as its pin.
    pub async fn trust_accept(
        &self,
        did: &str,
    ) -> Result<crate::trust::pins::PinState, ClientError> {
        let body = serde_json::json!({ "did": did });
        self.send(
            self.http
                .post(self.url("/admin/v1/trust/accept"))
                .json(&body),
        )
        .await
    }

    /// `POST /admin/v1/trust/check`: `did`'s live card against its pin (pinned if first
    /// seen), or `None` when the node has no live advertisement of it.
    pub async fn trust_check(
        &self,
        did: &str,
    ) -> Result<Option<crate::trust::pins::PinState>, ClientError> {
        let body = serde_json::json!({ "did": did });
        match self
            .send(
                self.http
                    .post(self.url("/admin/v1/trust/check"))
                    .json(&body),
            )
            .await
        {
            Ok(v) => Ok(Some(v)),
            Err(ClientError::Refused { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /admin/v1/trust/tools`: agent `did`'s MCP tools against their pins, and the list
    /// as a whole against its pin (accepted first with `accept`).
    pub async fn trust_tools(
        &self,
        did: &str,
        tools: &[Value],
        accept: bool,
    ) -> Result<crate::trust::pins::ToolPins, ClientError> {
        let body =
            serde_json::json!({ "did": did, "tools": tools, "accept": accept, "list": true });
        self.send(
            self.http
                .post(self.url("/admin/v1/trust/tools"))
                .json(&body),
        )
        .await
    }

    /// `GET /admin/v1/discover`.
    pub async fn discover(
        &self,
        skills: &[String],
        limit: usize,
    ) -> Result<Vec<Found>, ClientError> {
        let mut u = self.url("/admin/v1/discover");
        {
            let mut q = u.query_pairs_mut();
            for s in skills {
                q.append_pair("skill", s);
            }
            q.append_pair("limit", &limit.to_string());
        }
        self.send(self.http.get(u)).await
    }

    /// `POST /admin/v1/audit`: append a verified receipt to the node's audit log
    /// (`crate::audit`, whose `NewEntry` `new` is); the node verifies it again. The entry as
    /// stored.
    pub async fn audit_append(&self, new: &impl serde::Serialize) -> Result<Value, ClientError> {
        self.send(self.http.post(self.url("/admin/v1/audit")).json(new))
            .await
    }

    /// `GET /admin/v1/audit?after=N`: a page of raw entries after seq `after`, and the head.
    pub async fn audit_page(&self, after: u64) -> Result<Value, ClientError> {
        let mut u = self.url("/admin/v1/audit");
        u.query_pairs_mut().append_pair("after", &after.to_string());
        self.send(self.http.get(u)).await
    }

    /// `GET /admin/v1/audit/verify`: the node re-checks its audit log.
    pub async fn audit_verify(&self) -> Result<Value, ClientError> {
        self.send(self.http.get(self.url("/admin/v1/audit/verify")))
            .await
    }

    /// `GET /admin/v1/peers`.
    pub async fn peers(&self) -> Result<Peers, ClientError> {
        self.send(self.http.get(self.url("/admin/v1/peers"))).await
    }

    /// `GET /admin/v1/status`: the status page's report, as JSON.
    pub async fn status(&self) -> Result<Value, ClientError> {
        self.send(self.http.get(self.url(super::STATUS_PATH))).await
    }

    /// `GET /admin/v1/adverts/{did}`: the node's stored advertisement of `did`, or `None` if it
    /// has no live one.
    pub async fn advert(&self, did: &str) -> Result<Option<Value>, ClientError> {
        let mut u = self.url("/admin/v1/adverts/");
        u.path_segments_mut()
            .map_err(|()| ClientError::BadUrl {
                url: self.base.to_string(),
                reason: "cannot take a path".into(),
            })?
            .pop_if_empty()
            .push(did);
        match self.send(self.http.get(u)).await {
            Ok(v) => Ok(Some(v)),
            Err(ClientError::Refused { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Directory for Client {
    fn discover<'a>(
        &'a self,
        skills: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Found>, ClientError>> {
        Box::pin(Client::discover(self, skills, limit))
    }
    fn advert<'a>(&'a self, did: &'a str) -> BoxFuture<'a, Result<Option<Value>, ClientError>> {
        Box::pin(Client::advert(self, did))
    }
    fn peers(&self) -> BoxFuture<'_, Result<Peers, ClientError>> {
        Box::pin(Client::peers(self))
    }
    fn pin<'a>(
        &'a self,
        did: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::trust::pins::PinState>, ClientError>> {
        Box::pin(Client::trust_check(self, did))
    }
    fn pin_tools<'a>(
        &'a self,
        did: &'a str,
        tools: &'a [Value],
        accept: bool,
    ) -> BoxFuture<'a, Result<Option<crate::trust::pins::ToolPins>, ClientError>> {
        Box::pin(async move {
            Client::trust_tools(self, did, tools, accept)
                .await
                .map(Some)
        })
    }
}

/// The node's audit log, over its admin API: where a CLI process's verified receipts go.
impl crate::audit::ReceiptSink for Client {
    fn append<'a>(
        &'a self,
        entry: &'a crate::audit::NewEntry,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<u64, crate::audit::SinkError>> + Send + 'a>,
    > {
        use crate::audit::SinkError;
        Box::pin(async move {
            match self.audit_append(entry).await {
                Ok(v) => Ok(v["seq"].as_u64().unwrap_or(0)),
                Err(ClientError::NotRunning(url)) => Err(SinkError::NotRunning(url)),
                Err(e) => Err(SinkError::Failed(e.to_string())),
            }
        })
    }
}
