//! The admin listener's side: [`AdminState`], the routes behind [`Guard`], and the node's
//! own [`Directory`].

use super::{
    check_tags, directory, from_net, get, header, middleware, net, post, unix_now, AgentKeys,
    AgentSummary, ApiError, Arc, BoxFuture, Bytes, ClientError, ConnectInfo, Deserialize,
    Directory, Found, IntoResponse, Json, Method, Next, Peer, Peers, PublishRequest, Published,
    Publisher, RawQuery, Request, Response, Router, SecretKey, Serialize, SocketAddr, State, Stats,
    StatusCode, StoreError, StoredAdvert, Token, UnpublishRequest, Unpublished, UrlPath, Value,
    DEFAULT_LIMIT, MAX_BODY, MAX_LIMIT,
};

/// What the admin handlers share.
#[derive(Clone)]
pub struct AdminState {
    /// The network.
    pub client: net::Client,
    /// Publications.
    pub publisher: Arc<Publisher>,
    /// The node's key seed (the default publishing key).
    pub node_seed: Arc<[u8; 32]>,
    /// The agents' keys in the data directory.
    pub agent_keys: AgentKeys,
    /// The cards the operator accepted ([`crate::trust::pins`]); `None`: nothing is pinned.
    pub pins: Option<Arc<crate::trust::pins::Pins>>,
    /// The flag rules ([`crate::trust::flags`]).
    pub flags: Arc<crate::trust::flags::Rules>,
    /// The trust policy ([`crate::trust`]).
    pub trust: Arc<crate::trust::Policy>,
    /// The endorsements kept ([`crate::trust::endorsements`]); `None`: none count.
    pub endorsements: Option<Arc<crate::trust::endorsements::Endorsements>>,
    /// The flags and pin state of each card shown last ([`crate::trust::shown`]).
    pub shown: Arc<crate::trust::shown::Shown>,
}

/// Who may call: the token, and the admin listener's own origin (`http://127.0.0.1:PORT`).
#[derive(Clone, Debug)]
pub struct Guard {
    /// The credential.
    pub token: Token,
    /// The only `Origin` accepted when one is sent.
    pub origin: String,
}

impl Guard {
    /// The guard of an admin listener bound at `addr`.
    pub fn new(token: Token, addr: SocketAddr) -> Self {
        Self {
            token,
            origin: format!("http://{addr}"),
        }
    }
}

/// The `/admin/v1` routes, behind [`Guard`]. Other routers merged beside it (`/mcp`,
/// [`crate::mcp::http::router`]) guard themselves; paths no router has are refused by this
/// guard the same way, so that an unauthenticated caller learns nothing about the routes.
pub fn router(state: AdminState, guard: Guard) -> Router {
    router_with(state, guard, Router::new())
}

/// [`router`] with `extra` routes behind the same guard (the status page's
/// `/admin/v1/status`).
pub fn router_with(state: AdminState, guard: Guard, extra: Router) -> Router {
    Router::new()
        .route("/admin/v1/publish", post(publish))
        .route("/admin/v1/unpublish", post(unpublish))
        .route("/admin/v1/discover", get(discover))
        .route("/admin/v1/trust/accept", post(trust_accept))
        .route("/admin/v1/trust/check", post(trust_check))
        .route("/admin/v1/trust/tools", post(trust_tools))
        .route("/admin/v1/endorse", post(endorse))
        .route("/admin/v1/endorsements", get(endorsements))
        .route("/admin/v1/peers", get(peers))
        .route("/admin/v1/adverts", post(import))
        .route("/admin/v1/adverts/{did}", get(advert))
        .route("/admin/v1/metrics", get(metrics))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
        .merge(extra)
        // A fallback of its own (axum's answer, a bare 404), so that it stays behind the guard
        // whatever is merged beside it.
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(middleware::from_fn_with_state(guard, check))
}

/// The checks of the module documentation, in that order.
async fn check(
    State(guard): State<Guard>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if let Err(e) = guard.admit(remote, &req) {
        return e.into_response();
    }
    next.run(req).await
}

impl Guard {
    fn admit(&self, remote: SocketAddr, req: &Request) -> Result<(), ApiError> {
        if !remote.ip().is_loopback() {
            tracing::warn!(%remote, "refused admin request from a non-loopback address");
            return Err(ApiError::forbidden(
                "the admin API answers loopback clients only",
            ));
        }
        let headers = req.headers();
        let host_ok = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .is_some_and(is_loopback_authority);
        if !host_ok {
            return Err(ApiError::forbidden(
                "the admin API answers requests for a loopback host only",
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            if origin.as_bytes() != self.origin.as_bytes() {
                tracing::warn!(?origin, "refused admin request from a web origin");
                return Err(ApiError::forbidden(
                    "the admin API does not answer web pages of other origins",
                ));
            }
        }
        let authorized = headers
            .get(header::AUTHORIZATION)
            .is_some_and(|h| self.token.accepts(h.as_bytes()));
        if !authorized {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the admin API needs `Authorization: Bearer <token>` with the token in the node's admin.token",
            ));
        }
        if req.method() != Method::GET && req.method() != Method::HEAD && !is_json(req) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the admin API takes request bodies as Content-Type: application/json only",
            ));
        }
        Ok(())
    }
}

/// `Content-Type: application/json`, parameters (`; charset=utf-8`) allowed.
fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn is_loopback_authority(authority: &str) -> bool {
    let host = match authority.rsplit_once(':') {
        // `[::1]:7878`, `127.0.0.1:7878`, `localhost:7878`; a bare IPv6 literal has no port.
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => authority,
    };
    is_loopback_host(host)
}

async fn publish(
    State(state): State<AdminState>,
    body: Result<Json<PublishRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Published>, ApiError> {
    let Json(req) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let node_key = SecretKey::from_seed(&state.node_seed);
    let id = match req.did {
        Some(did) if did != node_key.did_key().as_str() => {
            let keys = state.agent_keys.clone();
            tokio::task::spawn_blocking(move || keys.load_identity(&did))
                .await
                .map_err(ApiError::internal)??
        }
        _ => crate::identity::Identity::did_key(node_key),
    };
    let published = state
        .publisher
        .publish_kept(&req.card, id, req.ttl_secs)
        .await?;
    Ok(Json(published))
}

async fn unpublish(
    State(state): State<AdminState>,
    body: Result<Json<UnpublishRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Unpublished>, ApiError> {
    let Json(req) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    match state.publisher.unpublish(&req.did).await? {
        Some(u) => Ok(Json(u)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{} is not published by this node", req.did),
        )),
    }
}

/// Parse `skill=a&skill=b&limit=N` (repeated keys, which serde's query parsing does not do).
fn parse_discover_query(query: &str) -> Result<(Vec<String>, usize), ApiError> {
    let mut skills = Vec::new();
    let mut limit = DEFAULT_LIMIT;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "skill" => skills.push(v.into_owned()),
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("limit must be 1..={MAX_LIMIT}, got {v:?}"))
                    })?;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown parameter {other:?}"
                )))
            }
        }
    }
    check_tags(&skills, directory::MAX_TAGS)?;
    Ok((skills, limit))
}

async fn discover(
    State(state): State<AdminState>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<Found>>, ApiError> {
    let (skills, limit) = parse_discover_query(query.as_deref().unwrap_or_default())?;
    Ok(Json(state.discover(&skills, limit).await?))
}

/// The body of `POST /admin/v1/trust/accept` and `/trust/check`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DidBody {
    did: String,
}

async fn trust_accept(
    State(state): State<AdminState>,
    Json(body): Json<DidBody>,
) -> Result<Json<crate::trust::pins::PinState>, ApiError> {
    Ok(Json(state.accept(&body.did).await?))
}

/// The body of `POST /admin/v1/endorse`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndorseBody {
    /// The DID vouched for.
    pub did: String,
    /// The skill tags (none: every skill).
    #[serde(default)]
    pub skills: Vec<String>,
    /// For how long, seconds (at most a year and a day).
    #[serde(default = "default_endorse_for")]
    pub for_secs: u64,
    /// Withdraw what the node said of `did` instead.
    #[serde(default)]
    pub revoke: bool,
}

fn default_endorse_for() -> u64 {
    30 * 24 * 3600
}

/// What `POST /admin/v1/endorse` answers and `GET /admin/v1/endorsements` lists.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndorsementView {
    /// What it says.
    #[serde(flatten)]
    pub endorsement: agentnet_did::endorsement::Endorsement,
    /// The compact JWS, as gossiped.
    pub jws: String,
    /// Whether it counts on this node (its issuer is an endorser the operator trusts, it is
    /// live and not a revocation).
    pub counts: bool,
}

async fn endorse(
    State(state): State<AdminState>,
    Json(body): Json<EndorseBody>,
) -> Result<Json<EndorsementView>, ApiError> {
    Ok(Json(state.endorse(body).await?))
}

async fn endorsements(
    State(state): State<AdminState>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<EndorsementView>>, ApiError> {
    let mut did = None;
    for (k, v) in url::form_urlencoded::parse(query.as_deref().unwrap_or_default().as_bytes()) {
        match &*k {
            "did" => did = Some(v.into_owned()),
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown parameter {other:?}"
                )))
            }
        }
    }
    Ok(Json(state.endorsements_of(did.as_deref()).await?))
}

/// The body of `POST /admin/v1/trust/tools`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolsBody {
    did: String,
    tools: Vec<Value>,
    #[serde(default)]
    accept: bool,
    /// Answer a [`crate::trust::pins::ToolPins`] (each tool and the list as a whole) rather than the
    /// array of each tool's state.
    #[serde(default)]
    list: bool,
}

async fn trust_tools(
    State(state): State<AdminState>,
    Json(body): Json<ToolsBody>,
) -> Result<Response, ApiError> {
    let pins = state
        .pin_tools_of(&body.did, body.tools, body.accept)
        .await?;
    Ok(if body.list {
        Json(pins).into_response()
    } else {
        Json(pins.tools).into_response()
    })
}

async fn trust_check(
    State(state): State<AdminState>,
    Json(body): Json<DidBody>,
) -> Result<Json<crate::trust::pins::PinState>, ApiError> {
    match state.pin_of(&body.did).await? {
        Some(p) => Ok(Json(p)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "no pin of {}: the node keeps no pins, or holds no live advertisement of it",
                body.did
            ),
        )),
    }
}

/// The card of a stored advert (`null` if it does not read, which a validated advert does).
fn card_of(a: &StoredAdvert) -> Value {
    serde_json::from_slice::<agentnet_discovery::advert::Advertisement>(&a.bytes)
        .map(|ad| ad.card)
        .unwrap_or(Value::Null)
}

/// Skill tags as the index (and endorsements) hold them.
fn normalized(skills: &[String]) -> Vec<String> {
    skills
        .iter()
        .filter_map(|t| agentnet_discovery::tags::normalize(t))
        .collect()
}

async fn peers(State(state): State<AdminState>) -> Result<Json<Peers>, ApiError> {
    Ok(Json(state.peers().await?))
}

impl AdminState {
    /// What `GET /admin/v1/discover` answers, for `skills` already checked
    /// ([`check_tags`]): [`AdminState::ranked`], each card flagged and checked against its pin
    /// (pinned when first seen).
    pub async fn discover(&self, skills: &[String], limit: usize) -> Result<Vec<Found>, ApiError> {
        let (pins, rules, shown) = (self.pins.clone(), self.flags.clone(), self.shown.clone());
        self.ranked(skills, limit, move |advert, judged, now| {
            let (flags, pin) = shown.of(&advert, &rules, pins.as_deref(), || card_of(&advert), now);
            let mut f = directory::found(advert);
            f.level = Some(judged.level);
            f.reasons = judged.reasons;
            f.flags = flags;
            f.pin = pin;
            f
        })
        .await
    }

    /// The best `limit` of every match the node holds for `skills` (checked), ranked by
    /// [`directory::top`] (policy, then level, then how long the node has known each DID),
    /// each made into what the caller shows by `show` (on a blocking thread: pins write).
    ///
    /// The policy and the ranking see every match before the cut, so a flood of fresh DIDs
    /// cannot push a trusted agent out of the answer (docs/PROTOCOL.md, "How discover
    /// ranks"). The network is asked only when the node holds fewer than `limit` matches.
    async fn ranked<T, F>(
        &self,
        skills: &[String],
        limit: usize,
        show: F,
    ) -> Result<Vec<T>, ApiError>
    where
        T: Send + 'static,
        F: Fn(StoredAdvert, crate::trust::Judged, u64) -> T + Send + Sync + 'static,
    {
        let limit = limit.clamp(1, MAX_LIMIT);
        let tags = normalized(skills);
        if tags.is_empty() {
            return Err(ApiError::bad_request("no usable skill tag to search for"));
        }
        let show = Arc::new(show);
        if let Some(found) = self.rank_held(&tags, limit, show.clone(), false).await? {
            return Ok(found);
        }
        // Few enough that the network may know more: providers are asked and what they
        // answer is validated and stored, as gossip is; then the index is read again.
        self.ask_network(skills, limit).await?;
        Ok(self
            .rank_held(&tags, limit, show, true)
            .await?
            .unwrap_or_default())
    }

    /// [`AdminState::ranked`] over what the node holds, in one blocking hop: every match of
    /// `tags` (normalized) in the index, ranked, the best `limit` shown; `None` when fewer than
    /// `limit` match and this is not the `last` look (the network may know more).
    async fn rank_held<T, F>(
        &self,
        tags: &[String],
        limit: usize,
        show: Arc<F>,
        last: bool,
    ) -> Result<Option<Vec<T>>, ApiError>
    where
        T: Send + 'static,
        F: Fn(StoredAdvert, crate::trust::Judged, u64) -> T + Send + Sync + 'static,
    {
        let store = self.client.store().clone();
        let (policy, endorsements) = (self.trust.clone(), self.endorsements.clone());
        let tags = tags.to_vec();
        tokio::task::spawn_blocking(move || {
            let now = unix_now();
            let (matches, cut) = store
                .matches(&tags, agentnet_discovery::store::MAX_MATCHES, now)
                .map_err(ApiError::internal)?;
            if !last && matches.len() < limit {
                return Ok(None);
            }
            let matches = if cut {
                // More matches than the walk takes: the newest were taken, and the agents the
                // operator trusts by name are added wherever they are.
                tracing::debug!(
                    ?tags,
                    "more matches than the node ranks; adding the trusted"
                );
                directory::with_trusted(
                    &store,
                    matches,
                    &tags,
                    &policy,
                    endorsements.as_deref(),
                    now,
                )
            } else {
                matches
            };
            Ok(Some(
                directory::top(
                    &store,
                    matches,
                    &tags,
                    limit,
                    &policy,
                    endorsements.as_deref(),
                    now,
                )
                .into_iter()
                .map(|(advert, judged)| show(advert, judged, now))
                .collect(),
            ))
        })
        .await
        .map_err(ApiError::internal)?
    }

    /// `POST /admin/v1/trust/check`: `did`'s live card against its pin (pinned if first
    /// seen); `None` when the node keeps no pins or holds no live advertisement of `did`.
    pub async fn pin_of(
        &self,
        did: &str,
    ) -> Result<Option<crate::trust::pins::PinState>, ApiError> {
        let Some(pins) = self.pins.clone() else {
            return Ok(None);
        };
        let Some(bytes) = self.advert_bytes(did).await? else {
            return Ok(None);
        };
        let card = serde_json::from_slice::<agentnet_discovery::advert::Advertisement>(&bytes)
            .map(|a| a.card)
            .map_err(ApiError::internal)?;
        let d = did.to_owned();
        tokio::task::spawn_blocking(move || Some(pins.observe(&d, &card, unix_now())))
            .await
            .map_err(ApiError::internal)
    }

    /// `POST /admin/v1/trust/tools`: agent `did`'s MCP tools against their pins, in order, and
    /// the list as a whole against its pin (all accepted first with `accept`); at most
    /// [`crate::trust::pins::MAX_TOOLS`] tools.
    pub async fn pin_tools_of(
        &self,
        did: &str,
        tools: Vec<Value>,
        accept: bool,
    ) -> Result<crate::trust::pins::ToolPins, ApiError> {
        let Some(pins) = self.pins.clone() else {
            return Err(ApiError::bad_request("this node keeps no pins"));
        };
        if tools.len() > crate::trust::pins::MAX_TOOLS {
            return Err(ApiError::bad_request(format!(
                "{} tools: at most {} are pinned per agent",
                tools.len(),
                crate::trust::pins::MAX_TOOLS
            )));
        }
        agentnet_did::Did::parse(did).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let d = did.to_owned();
        tokio::task::spawn_blocking(move || {
            let now = unix_now();
            if accept {
                for t in &tools {
                    pins.accept_tool(&d, t, now)?;
                }
                pins.accept_tool_list(&d, &tools, now)?;
            }
            Ok(crate::trust::pins::ToolPins {
                tools: tools
                    .iter()
                    .map(|t| pins.observe_tool(&d, t, now))
                    .collect(),
                list: pins.observe_tool_list(&d, &tools, now),
            })
        })
        .await
        .map_err(ApiError::internal)?
        .map_err(|e: String| ApiError::internal(e))
    }

    /// `POST /admin/v1/endorse`: sign, keep and gossip the node's endorsement of a DID (or its
    /// revocation).
    pub async fn endorse(&self, body: EndorseBody) -> Result<EndorsementView, ApiError> {
        use agentnet_did::endorsement;
        let Some(store) = self.endorsements.clone() else {
            return Err(ApiError::bad_request("this node keeps no endorsements"));
        };
        let subject = agentnet_did::Did::parse(&body.did)
            .map_err(|e| ApiError::bad_request(format!("did: {e}")))?;
        if !body.skills.is_empty() {
            check_tags(&body.skills, endorsement::MAX_SKILLS).map_err(ApiError::from)?;
        }
        let skills = normalized(&body.skills);
        if body.for_secs == 0 || body.for_secs > endorsement::MAX_LIFETIME {
            return Err(ApiError::bad_request(format!(
                "for: between 1 s and {} s (a year and a day)",
                endorsement::MAX_LIFETIME
            )));
        }
        if body.revoke && !skills.is_empty() {
            return Err(ApiError::bad_request(
                "a revocation withdraws every skill: leave out --skill",
            ));
        }
        let key = agentnet_did::SecretKey::from_seed(&self.node_seed);
        let now = unix_now();
        let (s, sub) = (store.clone(), subject.to_string());
        let (revoke, for_secs) = (body.revoke, body.for_secs);
        let (e, jws, accepted) =
            tokio::task::spawn_blocking(move || s.issue(&key, &sub, skills, for_secs, revoke, now))
                .await
                .map_err(ApiError::internal)?
                .map_err(ApiError::internal)?;
        match accepted {
            Ok(crate::trust::endorsements::Put::Stored) => {}
            Ok(crate::trust::endorsements::Put::Full(why)) => {
                return Err(ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "full", why))
            }
            // Another statement on this DID, made at the same moment, stood first.
            Ok(_) => return Err(ApiError::new(
                StatusCode::CONFLICT,
                "stale",
                "another statement of this node on this DID was made at the same moment: try again",
            )),
            Err(err) => return Err(ApiError::bad_request(err.to_string())),
        }
        if let Err(error) = self
            .client
            .publish_endorsement(jws.clone().into_bytes())
            .await
        {
            tracing::warn!(%error, "gossiping an endorsement (kept; re-announced later)");
        }
        Ok(EndorsementView {
            counts: !e.revoked,
            endorsement: e,
            jws,
        })
    }

    /// `GET /admin/v1/endorsements`: with `did`, the endorsers' statements about it that this
    /// node keeps and trusts (counted or revoked); without, the node's own.
    pub async fn endorsements_of(
        &self,
        did: Option<&str>,
    ) -> Result<Vec<EndorsementView>, ApiError> {
        let Some(store) = self.endorsements.clone() else {
            return Ok(Vec::new());
        };
        let own = agentnet_did::SecretKey::from_seed(&self.node_seed)
            .did_key()
            .to_string();
        let did = did.map(str::to_owned);
        tokio::task::spawn_blocking(move || {
            let now = unix_now();
            let trusted = store.trusted(now)?;
            let kept = match &did {
                None => store.issued_by(&own, now)?,
                Some(d) => {
                    let mut v = Vec::new();
                    for iss in trusted.keys() {
                        if let Some(k) = store.get(iss, d)? {
                            if k.endorsement.exp > now {
                                v.push(k);
                            }
                        }
                    }
                    v
                }
            };
            Ok::<_, agentnet_discovery::store::StoreError>(
                kept.into_iter()
                    .map(|k| EndorsementView {
                        counts: !k.endorsement.revoked && trusted.contains_key(&k.endorsement.iss),
                        endorsement: k.endorsement,
                        jws: k.jws,
                    })
                    .collect(),
            )
        })
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
    }

    /// `POST /admin/v1/trust/accept`: pin `did`'s live card as the one accepted.
    pub async fn accept(&self, did: &str) -> Result<crate::trust::pins::PinState, ApiError> {
        let Some(pins) = self.pins.clone() else {
            return Err(ApiError::bad_request("this node keeps no card pins"));
        };
        let Some(bytes) = self.advert_bytes(did).await? else {
            // No advertisement: the latest changed card the node read (a proxy's upstream).
            let (p, d) = (pins.clone(), did.to_owned());
            let now = unix_now();
            let accepted = tokio::task::spawn_blocking(move || p.accept_latest(&d, now))
                .await
                .map_err(ApiError::internal)?
                .map_err(ApiError::internal)?;
            if accepted {
                return Ok(crate::trust::pins::PinState::Pinned { since: now });
            }
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no live advertisement of {did}, and no changed card of it seen: `agentnet discover` lists the agents this node knows"),
            ));
        };
        let card = serde_json::from_slice::<agentnet_discovery::advert::Advertisement>(&bytes)
            .map(|a| a.card)
            .map_err(ApiError::internal)?;
        let d = did.to_owned();
        tokio::task::spawn_blocking(move || {
            let now = unix_now();
            pins.accept(&d, &card, now)?;
            Ok(pins.observe(&d, &card, now))
        })
        .await
        .map_err(ApiError::internal)?
        .map_err(|e: String| ApiError::internal(e))
    }

    /// Ask the network for more adverts of `skills` (validated and stored as gossip is) when
    /// the node holds fewer than `limit`.
    async fn ask_network(&self, skills: &[String], limit: usize) -> Result<(), ApiError> {
        self.client
            .discover(skills, limit.clamp(1, MAX_LIMIT))
            .await
            .map(drop)
            .map_err(from_net)
    }

    /// What `GET /admin/v1/peers` answers.
    pub async fn peers(&self) -> Result<Peers, ApiError> {
        let c = &self.client;
        let peers = c.peers().await.map_err(from_net)?;
        let listen = c.listen_addrs().await.map_err(from_net)?;
        let s = c.stats();
        let rejected_by_reason = s
            .rejected
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.to_string(), *v)).collect())
            .unwrap_or_default();
        Ok(Peers {
            peer_id: c.peer_id().to_string(),
            listen: listen.iter().map(|a| a.to_string()).collect(),
            peers: peers
                .into_iter()
                .map(|p| Peer {
                    peer_id: p.peer_id,
                    addrs: p.addrs,
                })
                .collect(),
            stats: Stats {
                accepted: s.accepted.get(),
                ignored: s.ignored.get(),
                rejected_by_reason,
                throttled: s.throttled.get(),
                muted: s.muted.get(),
                traffic: c.traffic(),
                connections_trimmed: s.trimmed.get(),
                endorsements: [
                    s.endorsements_accepted.get(),
                    s.endorsements_ignored.get(),
                    s.endorsements_rejected.get(),
                ],
            },
        })
    }

    /// The stored advertisement of `did` as received, or `None` without a live one.
    pub async fn advert_bytes(&self, did: &str) -> Result<Option<Vec<u8>>, ApiError> {
        let store = self.client.store().clone();
        let d = did.to_owned();
        let stored = tokio::task::spawn_blocking(move || store.get(&d, unix_now()))
            .await
            .map_err(ApiError::internal)?
            .map_err(|e| match e {
                StoreError::InvalidInput { .. } => ApiError::bad_request(e.to_string()),
                e => ApiError::internal(e),
            })?;
        Ok(stored.map(|a| a.bytes))
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.client.metrics_text(),
    )
        .into_response()
}

/// Validate, store and announce an advertisement signed elsewhere.
async fn import(State(state): State<AdminState>, body: Bytes) -> Result<Json<Published>, ApiError> {
    let v = state
        .client
        .publish(body.to_vec())
        .await
        .map_err(from_net)?;
    Ok(Json(Published {
        did: v.did,
        seq: v.seq,
        tags: v.tags,
        expires_at: v.expires_at,
        replaced: None,
    }))
}

async fn advert(
    State(state): State<AdminState>,
    UrlPath(did): UrlPath<String>,
) -> Result<Response, ApiError> {
    match state.advert_bytes(&did).await? {
        Some(bytes) => Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no live advertisement of {did}"),
        )),
    }
}

impl Directory for AdminState {
    fn discover<'a>(
        &'a self,
        skills: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Found>, ClientError>> {
        Box::pin(async move {
            check_tags(skills, directory::MAX_TAGS).map_err(ApiError::from)?;
            Ok(AdminState::discover(self, skills, limit).await?)
        })
    }
    /// Summarized from the stored advertisements' bytes, without building their cards as
    /// JSON values (`directory::summarize`).
    fn summaries<'a>(
        &'a self,
        skills: &'a [String],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<AgentSummary>, ClientError>> {
        Box::pin(async move {
            check_tags(skills, directory::MAX_TAGS).map_err(ApiError::from)?;
            let (pins, rules, shown) = (self.pins.clone(), self.flags.clone(), self.shown.clone());
            Ok(self
                .ranked(skills, limit, move |a, judged, now| {
                    // The card is read whole only when the memo does not know this advert.
                    let (flags, pin) = shown.of(&a, &rules, pins.as_deref(), || card_of(&a), now);
                    let mut s = directory::summarize(a);
                    s.trust = Some(directory::Trust {
                        level: Some(judged),
                        pin,
                        flags,
                    });
                    s
                })
                .await?)
        })
    }
    fn advert<'a>(&'a self, did: &'a str) -> BoxFuture<'a, Result<Option<Value>, ClientError>> {
        Box::pin(async move {
            match self.advert_bytes(did).await? {
                None => Ok(None),
                Some(b) => {
                    serde_json::from_slice(&b)
                        .map(Some)
                        .map_err(|source| ClientError::Unreadable {
                            url: "the node's store".into(),
                            source,
                        })
                }
            }
        })
    }
    fn peers(&self) -> BoxFuture<'_, Result<Peers, ClientError>> {
        Box::pin(async move { Ok(AdminState::peers(self).await?) })
    }
    fn pin<'a>(
        &'a self,
        did: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::trust::pins::PinState>, ClientError>> {
        Box::pin(async move { Ok(self.pin_of(did).await?) })
    }
    fn flag_rules(&self) -> Arc<crate::trust::flags::Rules> {
        self.flags.clone()
    }
    fn pin_tools<'a>(
        &'a self,
        did: &'a str,
        tools: &'a [Value],
        accept: bool,
    ) -> BoxFuture<'a, Result<Option<crate::trust::pins::ToolPins>, ClientError>> {
        Box::pin(async move { Ok(Some(self.pin_tools_of(did, tools.to_vec(), accept).await?)) })
    }
}

/// The guard's rules and the query parsing, without a server.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_authorities() {
        for ok in [
            "127.0.0.1:7878",
            "localhost",
            "LOCALHOST:1",
            "[::1]:80",
            "[::1]",
            "127.9.9.9",
        ] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "example.com",
            "evil.localhost.example:80",
            "10.0.0.1:7878",
            "[::2]:1",
            "",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }

    fn guard() -> (Guard, String) {
        let dir = tempfile::tempdir().unwrap();
        let token = Token::create(dir.path()).unwrap();
        let bearer = format!("Bearer {}", token.as_str());
        (Guard::new(token, "127.0.0.1:7879".parse().unwrap()), bearer)
    }

    fn req(method: &str, headers: &[(&str, &str)]) -> Request {
        let mut b = axum::http::Request::builder()
            .method(method)
            .uri("/admin/v1/publish");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(axum::body::Body::empty()).unwrap()
    }

    fn status(r: Result<(), ApiError>) -> u16 {
        r.map(|()| 200).unwrap_or_else(|e| e.status)
    }

    #[test]
    fn guard_refuses_missing_wrong_and_cross_site() {
        let (g, bearer) = guard();
        let local: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        let host = ("Host", "127.0.0.1:7879");
        let auth = ("Authorization", bearer.as_str());
        let json = ("Content-Type", "application/json");
        // The CLI's request.
        assert_eq!(
            status(g.admit(local, &req("POST", &[host, auth, json]))),
            200
        );
        assert_eq!(status(g.admit(local, &req("GET", &[host, auth]))), 200);
        // No or wrong credentials.
        assert_eq!(status(g.admit(local, &req("GET", &[host]))), 401);
        for wrong in [
            "Bearer ",
            "Bearer AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "Basic dXNlcjpwYXNz",
            &bearer[7..],
        ] {
            let r = req("GET", &[host, ("Authorization", wrong)]);
            assert_eq!(status(g.admit(local, &r)), 401, "{wrong}");
        }
        // A web page's "simple" cross-site POST: text/plain, its own Origin. Refused for the
        // Origin even if it somehow had the token, and for the media type even without Origin.
        let page = ("Origin", "http://localhost:3000");
        let text = ("Content-Type", "text/plain");
        assert_eq!(
            status(g.admit(local, &req("POST", &[host, page, text]))),
            403
        );
        assert_eq!(
            status(g.admit(local, &req("POST", &[host, auth, page, text]))),
            403
        );
        assert_eq!(
            status(g.admit(local, &req("POST", &[host, auth, text]))),
            415
        );
        assert_eq!(status(g.admit(local, &req("POST", &[host, auth]))), 415);
        assert_eq!(
            status(g.admit(
                local,
                &req(
                    "POST",
                    &[
                        host,
                        auth,
                        ("Content-Type", "application/json; charset=utf-8")
                    ]
                )
            )),
            200
        );
        // Only the listener's own origin passes.
        let own = ("Origin", "http://127.0.0.1:7879");
        assert_eq!(
            status(g.admit(local, &req("POST", &[host, auth, own, json]))),
            200
        );
        let null = ("Origin", "null");
        assert_eq!(
            status(g.admit(local, &req("GET", &[host, auth, null]))),
            403
        );
        // DNS rebinding and remote peers.
        let evil = ("Host", "attacker.example");
        assert_eq!(status(g.admit(local, &req("GET", &[evil, auth]))), 403);
        let remote: SocketAddr = "192.0.2.7:50000".parse().unwrap();
        assert_eq!(status(g.admit(remote, &req("GET", &[host, auth]))), 403);
    }

    #[test]
    fn publish_requests_carry_no_private_key() {
        let with_key = serde_json::json!({
            "card": {}, "key": {"kty": "OKP", "crv": "Ed25519", "x": "a", "d": "b"}
        });
        let e = serde_json::from_value::<PublishRequest>(with_key).unwrap_err();
        assert!(e.to_string().contains("unknown field `key`"), "{e}");
    }

    #[test]
    fn discover_query() {
        let (s, l) = parse_discover_query("skill=a&skill=b%20c&limit=5").unwrap();
        assert_eq!(s, ["a", "b c"]);
        assert_eq!(l, 5);
        assert!(parse_discover_query("limit=5").is_err());
        assert!(parse_discover_query("skill=a&limit=0").is_err());
        assert!(parse_discover_query("skill=a&limit=101").is_err());
        assert!(parse_discover_query("skill=a&x=1").is_err());
        // An unusable tag is a 400, not silently dropped from the search.
        let long = format!("skill=a&skill={}", "x".repeat(65));
        for bad in ["skill=a&skill=", "skill=%20", "skill=a%01b", &long] {
            let e = parse_discover_query(bad).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
        }
    }
}
