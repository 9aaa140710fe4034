//! The view's HTTP server: routes and thin handlers. Each handler finds the viewer
//! ([`super::auth`]), reads or acts with the viewer's client ([`super::reads`],
//! [`super::actions`]) and renders a page ([`super::pages`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use futures::Stream;
use maud::Markup;

use super::actions::{Action, ActionForm};
use super::auth::{self, Access, Refusal, Viewer};
use super::changes::ChangeSource;
use super::index::{Index, Query as ListQuery};
use super::pages::{self, bundle::ActionContext, layout::Frame};
use super::reads::{self, Reads};
use crate::cli::FetchFlags;

const APP_CSS: &str = include_str!("assets/app.css");
const APP_JS: &str = include_str!("assets/app.js");

/// The shortest time between two refreshes a live page is told about.
const LIVE_MIN_INTERVAL: Duration = Duration::from_millis(300);
/// How often a live stream looks at the change log.
const LIVE_POLL: Duration = Duration::from_millis(500);

/// What the server shares between requests.
pub struct App {
    /// How requests are authenticated and as whom they act.
    pub access: Access,
    /// Every BundleDeployment's summary.
    pub index: Index,
    /// The change log.
    pub changes: ChangeSource,
    /// The agent's namespace (revision snapshots, source Secrets).
    pub store_namespace: String,
    /// How the resume preview fetches sources (`pallet ui`); `None` compares with the active
    /// revision's snapshot instead (the agent's view fetches nothing for a viewer).
    pub fetch: Option<FetchFlags>,
}

/// The router of the view.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(overview))
        .route(
            "/assets/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/live", get(live))
        .route("/bundles/{name}", get(bundle))
        .route("/bundles/{name}/resume", get(resume_page).post(resume))
        .route("/bundles/{name}/diff", get(revision_diff))
        .route("/bundles/{name}/{action}", post(act))
        .layer(axum::middleware::from_fn(security_headers))
        .with_state(app)
}

/// Headers on every answer: no framing, no foreign scripts or styles, no caching of pages.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "private, max-age=300"),
        ],
        body,
    )
        .into_response()
}

fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

fn page(
    app: &App,
    viewer: Option<&Viewer>,
    title: &str,
    live: Option<String>,
    body: Markup,
) -> Markup {
    pages::layout::page(
        &Frame {
            title,
            user: viewer.map(|v| v.user.as_str()),
            csrf: viewer.map(|v| v.csrf.as_str()),
            live,
            agent_view: app.access.is_agent(),
        },
        body,
    )
}

/// The answer to a refused request: the sign-in page, or what is not allowed.
fn refused(app: &App, refusal: Refusal) -> Response {
    match refusal {
        Refusal::Login(why) => (
            StatusCode::UNAUTHORIZED,
            page(
                app,
                None,
                "Sign in",
                None,
                pages::login(app.access.is_agent(), &why, None),
            ),
        )
            .into_response(),
        Refusal::Forbidden(why) => (
            StatusCode::FORBIDDEN,
            page(
                app,
                None,
                "Not allowed",
                None,
                pages::problem("Not allowed", &why),
            ),
        )
            .into_response(),
        Refusal::Unavailable(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            page(
                app,
                None,
                "Unavailable",
                None,
                pages::problem("The API server could not be asked", &why),
            ),
        )
            .into_response(),
    }
}

/// A failed read or action: the API server's code and message when it answered.
fn failed(app: &App, viewer: &Viewer, title: &str, err: &anyhow::Error) -> Response {
    let code = reads::api_status(err)
        .and_then(|(code, _)| StatusCode::from_u16(code).ok())
        .unwrap_or(StatusCode::BAD_GATEWAY);
    let text = reads::error_text(err);
    (
        code,
        page(app, Some(viewer), title, None, pages::problem(title, &text)),
    )
        .into_response()
}

async fn viewer(app: &App, headers: &HeaderMap) -> Result<Viewer, Response> {
    // Pages of the agent's view come from its shared index: the user must be allowed to list.
    app.access
        .viewer(headers, app.access.is_agent())
        .await
        .map_err(|r| refused(app, r))
}

async fn overview(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Response {
    let viewer = match viewer(&app, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let live = live_address(&app, "");
    let listing = app.index.query(&query);
    let (synced, error) = app.index.health();
    let body = pages::overview::overview(&listing, &query, now(), (synced, error.as_deref()));
    page(&app, Some(&viewer), "Bundles", Some(live), body).into_response()
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct BundleQuery {
    done: String,
    to: String,
}

async fn bundle(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(query): Query<BundleQuery>,
) -> Response {
    let viewer = match viewer(&app, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    // Only the action's name comes back in the address: its text is the server's own.
    let done = ActionForm {
        reason: "…".into(),
        to: query.to.clone(),
        ..ActionForm::default()
    };
    let flash = Action::parse(&query.done, &done).ok().map(|a| match a {
        Action::Pause(_) => "Paused.".to_string(),
        other => other.done(),
    });
    bundle_page(
        &app,
        &viewer,
        &name,
        flash.as_deref().map(|t| ("notice", t)),
        StatusCode::OK,
    )
    .await
}

async fn bundle_page(
    app: &App,
    viewer: &Viewer,
    name: &str,
    flash: Option<(&str, &str)>,
    code: StatusCode,
) -> Response {
    let reads = Reads {
        client: &viewer.client,
        store_namespace: &app.store_namespace,
        changes: &app.changes,
        index: &app.index,
    };
    let live = live_address(app, name);
    match reads::bundle_view(&reads, name, now()).await {
        Ok(view) => {
            let actions = ActionContext {
                enabled: viewer.can_act,
                csrf: &viewer.csrf,
            };
            let body = pages::bundle::bundle(&view, &actions, flash);
            (code, page(app, Some(viewer), name, Some(live), body)).into_response()
        }
        Err(e) => failed(app, viewer, name, &e),
    }
}

async fn resume_page(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let viewer = match viewer(&app, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let bd = match crate::cli::ops::get_bd(&viewer.client, &name).await {
        Ok(bd) => bd,
        Err(e) => return failed(&app, &viewer, &name, &e),
    };
    let preview = crate::cli::ops::resume_preview(
        &viewer.config,
        &bd,
        app.fetch.as_ref(),
        &app.store_namespace,
    )
    .await;
    let compared = match (&preview, app.fetch.is_some()) {
        (Ok((Some(n), _)), true) => format!("Compared with revision {n}, the one rolled back to: resuming keeps it until the spec or the sources change."),
        (Ok((Some(n), _)), false) => format!("Compared with revision {n}, the active one (the agent's view fetches no sources: a source that moved meanwhile also makes a new revision)."),
        _ => "Compared with what the sources render now.".to_string(),
    };
    let lines = preview
        .map(|(_, drifted)| {
            drifted
                .into_iter()
                .map(|d| pages::bundle::PreviewLine {
                    object: d.key.to_string(),
                    missing: d.missing,
                    fields: d.paths,
                })
                .collect()
        })
        .map_err(|e| reads::error_text(&e));
    let actions = ActionContext {
        enabled: viewer.can_act,
        csrf: &viewer.csrf,
    };
    let body = pages::bundle::resume(&name, bd.spec.paused, &compared, &lines, &actions);
    page(&app, Some(&viewer), &format!("Resume {name}"), None, body).into_response()
}

#[derive(serde::Deserialize)]
struct DiffQuery {
    from: i64,
    to: i64,
}

async fn revision_diff(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(query): Query<DiffQuery>,
) -> Response {
    let viewer = match viewer(&app, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let result = reads::revision_diff(
        &viewer.client,
        &app.store_namespace,
        &name,
        query.from,
        query.to,
    )
    .await
    .map_err(|e| reads::error_text(&e));
    let body = pages::bundle::revision_diff(&name, query.from, query.to, &result);
    page(
        &app,
        Some(&viewer),
        &format!("{name}: revision {} → {}", query.from, query.to),
        None,
        body,
    )
    .into_response()
}

async fn act(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    act_on(&app, &headers, &name, &action, &form).await
}

/// The resume's confirmation posts to the address of its preview.
async fn resume(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    act_on(&app, &headers, &name, "resume", &form).await
}

async fn act_on(
    app: &App,
    headers: &HeaderMap,
    name: &str,
    action: &str,
    form: &ActionForm,
) -> Response {
    let viewer = match app.access.viewer(headers, false).await {
        Ok(v) => v,
        Err(r) => return refused(app, r),
    };
    if !viewer.can_act {
        return refused(
            app,
            Refusal::Forbidden(
                "this view is read-only (the agent serves actions only with --ui-actions)".into(),
            ),
        );
    }
    if !auth::same_origin(headers) || !auth::same_secret(&form.csrf, &viewer.csrf) {
        return refused(app, Refusal::Forbidden("the form did not come from this view (its CSRF token or origin does not match): reload the page and try again".into()));
    }
    let action = match Action::parse(action, form) {
        Ok(a) => a,
        Err(why) => {
            return bundle_page(
                app,
                &viewer,
                name,
                Some(("error", &why)),
                StatusCode::BAD_REQUEST,
            )
            .await
        }
    };
    match action.run(&viewer.client, name).await {
        Ok(()) => {
            let to = match action {
                Action::Rollback(n) => format!("&to={n}"),
                _ => String::new(),
            };
            Redirect::to(&format!("/bundles/{name}?done={}{to}", action.name())).into_response()
        }
        Err(e) => {
            let code = reads::api_status(&e)
                .and_then(|(code, _)| StatusCode::from_u16(code).ok())
                .unwrap_or(StatusCode::BAD_GATEWAY);
            let text = format!("The API server refused: {}", reads::error_text(&e));
            bundle_page(app, &viewer, name, Some(("error", &text)), code).await
        }
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct LoginQuery {
    token: String,
}

async fn login_page(State(app): State<Arc<App>>, Query(query): Query<LoginQuery>) -> Response {
    if let Access::Local(local) = &app.access {
        let secret = &local.secret;
        if auth::same_secret(&query.token, secret) {
            return signed_in(secret, false);
        }
        let error = (!query.token.is_empty()).then_some(
            "That login secret is not this server's: open the address `pallet ui` printed.",
        );
        let body = pages::login(
            false,
            "Open the address `pallet ui` printed: it carries the login secret.",
            error,
        );
        return (
            StatusCode::UNAUTHORIZED,
            page(&app, None, "Sign in", None, body),
        )
            .into_response();
    }
    page(
        &app,
        None,
        "Sign in",
        None,
        pages::login(true, "Sign in with a Kubernetes token.", None),
    )
    .into_response()
}

fn signed_in(credential: &str, secure: bool) -> Response {
    (
        [(header::SET_COOKIE, auth::set_cookie(credential, secure))],
        Redirect::to("/"),
    )
        .into_response()
}

fn over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct LoginForm {
    token: String,
}

async fn login(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !app.access.is_agent() || !auth::same_origin(&headers) {
        return refused(
            &app,
            Refusal::Forbidden("sign in from this view's own page".into()),
        );
    }
    let token = form.token.trim().to_string();
    let mut probe = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) {
        probe.insert(header::AUTHORIZATION, value);
    }
    match app.access.viewer(&probe, false).await {
        Ok(_) => signed_in(&token, over_https(&headers)),
        Err(Refusal::Login(why))
        | Err(Refusal::Forbidden(why))
        | Err(Refusal::Unavailable(why)) => {
            let body = pages::login(true, "Sign in with a Kubernetes token.", Some(&why));
            (
                StatusCode::UNAUTHORIZED,
                page(&app, None, "Sign in", None, body),
            )
                .into_response()
        }
    }
}

async fn logout(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    let valid = auth::credential(&headers)
        .is_some_and(|c| auth::same_secret(&form.csrf, &auth::csrf_token(&c)));
    if !valid || !auth::same_origin(&headers) {
        return refused(
            &app,
            Refusal::Forbidden("the form did not come from this view".into()),
        );
    }
    signed_in("", over_https(&headers))
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct LiveQuery {
    bundle: String,
    /// The key the page was rendered at ([`live_key`]): a change between the page's render and
    /// the stream's start is a refresh, not lost.
    since: String,
}

/// What a live page's content depends on, as one comparable value.
fn live_key(app: &App, bundle: &str) -> String {
    if bundle.is_empty() {
        return format!("{}", app.index.version());
    }
    let version = app
        .index
        .get(bundle)
        .map(|s| s.resource_version)
        .unwrap_or_default();
    format!("{version}.{}", app.changes.version())
}

/// A live page's stream address: its bundle (none for the overview) and the key it is rendered
/// at. Taken before the page reads what it shows, so that a change while it renders or before
/// its stream connects is a refresh.
fn live_address(app: &App, bundle: &str) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    if !bundle.is_empty() {
        query.append_pair("bundle", bundle);
    }
    query.append_pair("since", &live_key(app, bundle));
    format!("/live?{}", query.finish())
}

/// The live stream: a `refresh` event whenever what the page shows changed (the index moved,
/// or new change-log lines arrived).
async fn live(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(query): Query<LiveQuery>,
) -> Response {
    if let Err(r) = viewer(&app, &headers).await {
        return r;
    }
    Sse::new(live_events(app, query))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn live_events(app: Arc<App>, query: LiveQuery) -> impl Stream<Item = Result<Event, Infallible>> {
    let changes = app.index.subscribe();
    let LiveQuery { bundle, since } = query;
    refresh_events(move || live_key(&app, &bundle), changes, since)
}

/// A `refresh` event each time `key` moves from the last one told (at first `since`, or the key
/// at the start when the page sent none), looked at when `changes` moves and every
/// [`LIVE_POLL`]; a burst of changes is one refresh.
fn refresh_events(
    key: impl Fn() -> String + Send + 'static,
    changes: tokio::sync::watch::Receiver<u64>,
    since: String,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let first = if since.is_empty() { key() } else { since };
    futures::stream::unfold(
        (key, changes, first),
        |(key, mut changes, last)| async move {
            loop {
                if key() != last {
                    // Let a burst of changes settle into one refresh.
                    tokio::time::sleep(LIVE_MIN_INTERVAL).await;
                    let event = Event::default().event("refresh").data("changed");
                    let now = key();
                    return Some((Ok(event), (key, changes, now)));
                }
                tokio::select! {
                    moved = changes.changed() => {
                        if moved.is_err() {
                            tokio::time::sleep(LIVE_POLL).await;
                        }
                    }
                    () = tokio::time::sleep(LIVE_POLL) => {}
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::{refresh_events, LIVE_POLL};
    use futures::StreamExt;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    fn shared_key(value: &str) -> (Arc<Mutex<String>>, impl Fn() -> String + Send + 'static) {
        let key = Arc::new(Mutex::new(value.to_string()));
        let read = Arc::clone(&key);
        (key, move || read.lock().unwrap().clone())
    }

    #[tokio::test]
    async fn a_change_before_the_stream_started_is_a_refresh() {
        // The page was rendered at key "7"; the index moved to "8" before its stream connected.
        let (_key, read) = shared_key("8");
        let (_moved, changes) = tokio::sync::watch::channel(0u64);
        let mut events = Box::pin(refresh_events(read, changes, "7".into()));
        let first = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
        assert!(
            matches!(first, Ok(Some(Ok(_)))),
            "no refresh for a missed change"
        );
    }

    #[tokio::test]
    async fn a_page_at_the_current_key_is_refreshed_once_it_moves() {
        let (key, read) = shared_key("7");
        let (moved, changes) = tokio::sync::watch::channel(0u64);
        let mut events = Box::pin(refresh_events(read, changes, "7".into()));
        let quiet = tokio::time::timeout(LIVE_POLL * 3, events.next()).await;
        assert!(quiet.is_err(), "a refresh with nothing changed");
        *key.lock().unwrap() = "8".into();
        moved.send(1).unwrap();
        let next = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
        assert!(matches!(next, Ok(Some(Ok(_)))), "no refresh after a change");
    }
}
