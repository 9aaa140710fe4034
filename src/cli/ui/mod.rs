//! The web view: every BundleDeployment at a glance, a page per bundle (conditions, revisions,
//! objects, drift, change log, Events, notifications, provenance, dependencies) and the on-call
//! actions, live.
//!
//! Served by `pallet ui` on loopback with the user's kubeconfig, or by the agent
//! (`--ui-address`) for everyone with a Kubernetes token ([`auth`] says how each is secured).
//! The layers: [`state`], [`index`], [`model`] and [`pages`] are pure (plain values in, plain
//! values or markup out); [`reads`] and [`actions`] call the CLI's own functions with the
//! viewer's client; [`server`] holds the thin handlers. Pages are rendered on the server;
//! `assets/app.js` only follows the live stream. Assets are compiled into the binary.

pub mod actions;
pub mod auth;
pub mod changes;
pub mod index;
pub mod model;
pub mod pages;
pub mod reads;
pub mod server;
pub mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use kube::{Client, Config};

use crate::cli::{FetchFlags, KubeArgs};
use auth::Access;
use changes::ChangeSource;
use index::Index;
use server::App;

/// Flags of `pallet ui`.
#[derive(Args, Debug)]
pub struct UiArgs {
    /// Address to serve on: a loopback address and port (`127.0.0.1:0` picks a free port).
    #[arg(long, default_value = "127.0.0.1:7080")]
    pub address: String,
    /// The agent's namespace: where revision snapshots are stored and Secrets named without a
    /// namespace are read (the resume preview renders the sources).
    #[arg(
        long = "agent-namespace",
        value_name = "NS",
        default_value = "pallet-system"
    )]
    pub namespace: String,
    /// The agent's change-log file (`pallet agent --change-log FILE`): each bundle's page shows
    /// its lines, live.
    #[arg(long, value_name = "FILE")]
    pub change_log: Option<PathBuf>,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Fetch settings (the resume preview renders the sources as `pallet resume --dry-run`).
    #[command(flatten)]
    pub fetch: FetchFlags,
}

/// Errors starting a server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address does not parse.
    #[error("{address:?} is not an IP address and port: {source}")]
    BadAddress {
        /// The address given.
        address: String,
        /// Why.
        source: std::net::AddrParseError,
    },
    /// `pallet ui` serves loopback only.
    #[error("`pallet ui` serves on a loopback address only (127.0.0.1, ::1), not {0}: it acts with your own credentials. For a view others can reach, run the agent's (--ui-address)")]
    NotLoopback(SocketAddr),
    /// Binding failed.
    #[error("listening on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// `address` as a socket address.
fn parse_address(address: &str) -> Result<SocketAddr, ServeError> {
    address.parse().map_err(|source| ServeError::BadAddress {
        address: address.to_string(),
        source,
    })
}

async fn bind(address: SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| ServeError::Bind { address, source })
}

/// The kubeconfig context the flags select, in words.
fn context_name(kube: &KubeArgs) -> String {
    let named = kube.context.clone().or_else(|| {
        let kubeconfig = match &kube.kubeconfig {
            Some(path) => kube::config::Kubeconfig::read_from(path).ok(),
            None => kube::config::Kubeconfig::read().ok(),
        };
        kubeconfig.and_then(|k| k.current_context)
    });
    match named {
        Some(context) => format!("you (kubeconfig context {context})"),
        None => "you (in-cluster credentials)".into(),
    }
}

/// Runs `pallet ui` until interrupted.
pub fn run(args: UiArgs) -> anyhow::Result<()> {
    crate::cli::block_on(async move {
        let address = parse_address(&args.address)?;
        if !address.ip().is_loopback() {
            return Err(ServeError::NotLoopback(address).into());
        }
        let config = args.kube.config().await?;
        let client = Client::try_from(config.clone()).context("building the Kubernetes client")?;
        let secret = auth::new_secret()?;
        let access = Access::Local(Box::new(auth::LocalAccess {
            secret: secret.clone(),
            client: client.clone(),
            config,
            who: context_name(&args.kube),
        }));
        let changes = match &args.change_log {
            Some(path) => ChangeSource::File(path.clone()),
            None => ChangeSource::None,
        };
        let listener = bind(address).await?;
        let bound = listener.local_addr()?;
        let index = Index::default();
        let watch = index.spawn_watch(client);
        let app = Arc::new(App {
            access,
            index,
            changes,
            store_namespace: args.namespace.clone(),
            fetch: Some(args.fetch.clone()),
        });
        crate::cli::write_stdout(&format!(
            "pallet ui: open http://{bound}/login?token={secret}\n(the address carries the view's login secret; Ctrl-C stops the view)\n"
        ))?;
        axum::serve(listener, server::router(app))
            .with_graceful_shutdown(shutdown())
            .await
            .context("serving the view")?;
        watch.abort();
        Ok(())
    })
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// How the agent serves the view (`pallet agent --ui-*`).
pub struct AgentView {
    /// Where to listen.
    pub address: String,
    /// Whether actions are offered.
    pub actions: bool,
    /// The agent's namespace.
    pub namespace: String,
    /// The change log's recent lines.
    pub changes: ChangeSource,
}

/// Starts the agent's view with the agent's client (`config`'s identity) and returns the
/// address it listens on; it runs until the process ends.
pub async fn serve_agent(
    view: AgentView,
    client: Client,
    config: Config,
) -> anyhow::Result<SocketAddr> {
    let address = parse_address(&view.address)?;
    let listener = bind(address).await?;
    let bound = listener.local_addr()?;
    let index = Index::default();
    index.spawn_watch(client.clone());
    let app = Arc::new(App {
        access: Access::agent(client, config, view.actions),
        index,
        changes: view.changes,
        store_namespace: view.namespace,
        fetch: None,
    });
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, server::router(app)).await {
            tracing::error!(%error, "the web view stopped");
        }
    });
    Ok(bound)
}
