//! The `pallet` command line: one subcommand per user-facing task.
//!
//! Cluster commands take kubectl's `--kubeconfig`/`--context`; commands whose output is data take
//! `-o table|yaml|json`. The binary also works as the kubectl plugin `kubectl pallet` (invoked
//! through a `kubectl-pallet` link), see [`command_for`].

#[macro_use]
pub mod terminal;
mod acting;
mod agent;
mod completion;
pub(crate) mod diff;
pub mod events;
pub mod exit;
mod fetch;
mod get;
mod help;
pub mod install;
pub(crate) mod ops;
pub(crate) mod plan;
mod progress;
mod push;
mod render;
mod sets;
pub(crate) mod test;
pub mod tree;
pub mod ui;

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// pallet: a bundle deployment agent for Kubernetes.
#[derive(Parser, Debug)]
#[command(name = "pallet", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags of `pallet crd`.
#[derive(clap::Args, Debug)]
pub struct CrdArgs {
    /// Print only this kind's CustomResourceDefinition. Default: both, as two YAML documents.
    #[arg(long, value_enum)]
    pub kind: Option<CrdKind>,
}

/// The kinds `pallet crd` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum CrdKind {
    /// BundleDeployment (deploy/crd.yaml).
    #[value(name = "BundleDeployment")]
    BundleDeployment,
    /// BundleDeploymentSet (deploy/crd-set.yaml).
    #[value(name = "BundleDeploymentSet")]
    BundleDeploymentSet,
}

/// pallet's subcommands (grouped in `--help` by [`help::GROUPS`]).
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Install the agent, the CRD and RBAC in the cluster (`--export` prints them instead).
    Install(install::InstallArgs),
    /// Remove the agent and the CRD; every bundle's objects stay unless `--delete-bundles`.
    Uninstall(install::uninstall::UninstallArgs),
    /// Check the installation: Kubernetes version, CRD, agent, RBAC, certificates, stuck bundles.
    Check(install::check::CheckArgs),
    /// Show the versions of this CLI, the running agent and the installed CRD.
    Version(install::version::VersionArgs),
    /// Print pallet's CustomResourceDefinitions as YAML (deploy/crd.yaml and deploy/crd-set.yaml).
    Crd(CrdArgs),
    /// List BundleDeployments with their cluster and their Ready condition's reason and message
    /// (`-w` watches).
    Get(get::GetArgs),
    /// List BundleDeploymentSets with their revision and Ready condition; a named set with
    /// each of its clusters.
    Sets(sets::SetsArgs),
    /// Show how the cluster differs from what the agent would apply (exit status 5 when it does).
    Diff(diff::DiffArgs),
    /// Show a BundleDeployment's objects and their Pods, each with its health.
    Tree(tree::TreeArgs),
    /// Show the Events of a BundleDeployment and of its objects, oldest first.
    Events(events::EventsArgs),
    /// Fetch a BundleDeployment's sources into DIR and print the immutable ref of each.
    Fetch(fetch::FetchArgs),
    /// Run the agent: watch BundleDeployments and keep their bundles applied.
    Agent(Box<agent::AgentArgs>),
    /// Render a BundleDeployment's sources (or a local tree) to objects, without a cluster.
    Render(render::RenderArgs),
    /// Preview what applying a BundleDeployment would do: per-object diff (server-side dry-run),
    /// prunes and the RBAC it grants; `--pin` prints it with every source pinned.
    Plan(plan::PlanArgs),
    /// Show a BundleDeployment's conditions, revisions, drift and unhealthy objects.
    Status(ops::StatusArgs),
    /// List a BundleDeployment's revisions.
    History(ops::StatusArgs),
    /// Ask the agent to roll back to a stored revision.
    Rollback(ops::RollbackArgs),
    /// Ask the agent to retry a failed revision now.
    Retry(ops::RequestArgs),
    /// Ask the agent to reconcile now (re-resolve floating refs, correct drift).
    Reconcile(ops::RequestArgs),
    /// Run a helm chart's test hooks against the active revision and print their results.
    Test(test::TestArgs),
    /// Pause a BundleDeployment: the agent stops writing to its objects.
    Pause(ops::PauseArgs),
    /// Resume a paused BundleDeployment (`--dry-run`: show what resuming would revert).
    Resume(ops::ResumeArgs),
    /// Show which BundleDeployment and revision wrote an object, and where that came from.
    Trace(ops::TraceArgs),
    /// Serve the web view on 127.0.0.1 with your kubeconfig: every bundle, its revisions,
    /// objects, drift and change log, live, and the on-call actions.
    Ui(Box<ui::UiArgs>),
    /// Publish a directory as an OCI bundle image.
    Push(push::PushArgs),
    /// Print a shell completion script.
    Completion(CompletionArgs),
    /// Render one request read from standard input within resource limits (the agent's render
    /// sandbox runs this in a child process; not for direct use).
    #[command(name = "render-sandbox", hide = true)]
    RenderSandbox(RenderSandboxArgs),
    /// Run an `exec` function within resource limits and a deadline, killing whatever it leaves
    /// behind (the agent runs this for each call; not for direct use).
    #[command(name = "function-sandbox", hide = true)]
    FunctionSandbox(FunctionSandboxArgs),
    /// Write the generated reference pages or the man pages (the project's documentation and
    /// release builds run this; not for direct use).
    #[command(hide = true, subcommand)]
    Docs(DocsCommand),
}

/// Subcommands of the hidden `pallet docs`.
#[derive(Subcommand, Debug)]
pub enum DocsCommand {
    /// Write the reference pages generated from the code (`docs/reference/*.md`) into DIR.
    Generate {
        /// The directory, usually `docs/reference`.
        dir: PathBuf,
    },
    /// Write a man page for `pallet` and each of its commands into DIR.
    Man {
        /// The directory.
        dir: PathBuf,
    },
}

/// Flags of the hidden `pallet render-sandbox`.
#[derive(Args, Debug)]
pub struct RenderSandboxArgs {
    /// Memory the render may allocate, in bytes.
    #[arg(long)]
    pub memory_bytes: u64,
    /// CPU time the render may use, in seconds.
    #[arg(long)]
    pub cpu_seconds: u64,
    /// The limits are in place (set by this command before it started again).
    #[arg(long)]
    pub limited: bool,
}

/// Flags of the hidden `pallet function-sandbox`.
#[derive(Args, Debug)]
pub struct FunctionSandboxArgs {
    /// Memory the function may allocate, in bytes.
    #[arg(long)]
    pub memory_bytes: u64,
    /// CPU time the function may use, in seconds.
    #[arg(long)]
    pub cpu_seconds: u64,
    /// Wall-clock time the function may take, in milliseconds.
    #[arg(long)]
    pub timeout_ms: u64,
    /// The limits are in place (set by this command before it started again).
    #[arg(long)]
    pub limited: bool,
    /// The function's executable.
    pub program: PathBuf,
}

/// Flags of `pallet completion`.
#[derive(Args, Debug)]
pub struct CompletionArgs {
    /// The shell.
    pub shell: completion::CompletionShell,
}

/// kubectl-style cluster flags, on every command that talks to a cluster.
#[derive(Args, Debug, Clone, Default)]
pub struct KubeArgs {
    /// Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
}

/// Names `program` (and pallet's version) in every request's User-Agent. The API server shows it
/// in audit logs, and derives the field manager of a write that names none from it, so
/// `managedFields` say `pallet` (the agent's finalizer and status writes) or `pallet-cli` where
/// they would otherwise say `unknown`.
pub fn identified(mut config: Config, program: &'static str) -> Config {
    let agent = format!("{program}/{}", env!("CARGO_PKG_VERSION"));
    if let Ok(value) = http::HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, value));
    }
    config
}

/// The client configuration of a kubeconfig file and context: the file given, else
/// `$KUBECONFIG` or `~/.kube/config`, else (with no context named) the in-cluster
/// configuration. A context that is named is always looked up, and its absence is an error: a
/// command never falls back to another cluster than the one asked for.
pub async fn kube_config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> anyhow::Result<Config> {
    crate::tls::install_crypto_provider();
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    match (kubeconfig, context) {
        (Some(path), _) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Ok(Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))?)
        }
        (None, Some(context)) => Ok(Config::from_kubeconfig(&options)
            .await
            .with_context(|| format!("context {context:?} ($KUBECONFIG or ~/.kube/config)"))?),
        (None, None) => Ok(Config::infer()
            .await
            .context("no cluster configured (--kubeconfig, $KUBECONFIG or ~/.kube/config)")?),
    }
}

impl KubeArgs {
    /// The client configuration these flags select.
    pub async fn config(&self) -> anyhow::Result<Config> {
        let config = kube_config(self.kubeconfig.as_deref(), self.context.as_deref()).await?;
        Ok(identified(config, "pallet-cli"))
    }

    /// A client for the selected cluster.
    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::try_from(self.config().await?)?)
    }
}

/// How data is printed.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    /// Human-readable text.
    #[default]
    Table,
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// `value` as YAML, long strings kept on one line (a digest reference folded over two lines is
/// valid YAML but hard to read and to grep), multi-line strings as literal blocks.
pub fn to_yaml<T: serde::Serialize>(value: &T) -> anyhow::Result<String> {
    let mut options = serde_saphyr::SerializerOptions::default();
    options.folded_wrap_chars = usize::MAX;
    Ok(serde_saphyr::to_string_with_options(value, options)?)
}

/// Prints `value` as YAML or JSON.
pub fn print_data(output: Output, value: &serde_json::Value) -> anyhow::Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(value)?),
        _ => print!("{}", to_yaml(value)?),
    }
    Ok(())
}

/// Which restricted addresses and locations sources, registries, chart repositories,
/// notification targets and health probes may name (the agent and the commands that fetch).
#[derive(Args, Debug, Clone, Default)]
pub struct EgressFlags {
    /// Allow loopback addresses (127.0.0.0/8, ::1, 0.0.0.0) as source, chart repository,
    /// registry, git server, notification and probe targets (local test servers only: the
    /// agent's own metrics server and sidecars are there).
    #[arg(long)]
    pub allow_loopback_egress: bool,
    /// Allow link-local addresses (169.254.0.0/16, fe80::/10) and cloud metadata addresses
    /// (169.254.169.254, fd00:ec2::254, 100.100.100.200) as targets; they hand out the node's
    /// cloud credentials.
    #[arg(long)]
    pub allow_link_local_egress: bool,
    /// Allow git repositories that are local paths or `file://` URLs (the agent's own files).
    #[arg(long)]
    pub allow_local_git: bool,
}

impl EgressFlags {
    /// The policy these flags set.
    pub fn policy(&self) -> crate::egress::EgressPolicy {
        crate::egress::EgressPolicy {
            allow_loopback: self.allow_loopback_egress,
            allow_link_local: self.allow_link_local_egress,
            allow_local_git: self.allow_local_git,
        }
    }
}

/// Source-fetch flags shared by the commands that fetch (render, plan, resume --dry-run).
#[derive(Args, Debug, Clone)]
pub struct FetchFlags {
    /// Source cache directory (default ~/.cache/pallet/fetch).
    #[arg(long, env = "PALLET_FETCH_CACHE")]
    pub cache_dir: Option<PathBuf>,
    /// Registries (host:port) spoken to over plain HTTP (repeatable).
    #[arg(long = "plain-http-registry")]
    pub plain_http_registries: Vec<String>,
    /// An executable `function` processors may run (absolute path, repeatable), as the agent's
    /// flag of the same name allows it.
    #[arg(long = "allow-function-exec", value_name = "PATH")]
    pub allow_function_exec: Vec<PathBuf>,
    /// A host `function` processors' `url` may name (`host`, `host:port` or `*.domain`,
    /// repeatable), as the agent's flag of the same name allows it.
    #[arg(long = "allow-function-host", value_name = "HOST")]
    pub allow_function_host: Vec<String>,
    /// Addresses and locations sources may name.
    #[command(flatten)]
    pub egress: EgressFlags,
    /// What one source may unpack.
    #[command(flatten)]
    pub unpack: UnpackFlags,
}

/// Bounds on what one source may read and unpack, shared by the agent and the commands that
/// fetch.
#[derive(Args, Debug, Clone)]
pub struct UnpackFlags {
    /// Bytes one source may inflate, in MiB: every byte of its decompressed archives (the data
    /// of skipped entries and header records included), each hardlink at its target's size,
    /// single files and git blobs. A source over it is refused (Unpacked=False, reason
    /// LimitExceeded). The default fits the agent's Deployment (1 GiB of memory, a 3 GiB cache
    /// volume holding at most --cache-max-mib of cached sources).
    #[arg(long, default_value_t = crate::source::Limits::DEFAULT.max_total_bytes >> 20)]
    pub unpack_max_mib: u64,
    /// Largest single file of a source, in MiB; also the largest chart repository index.yaml
    /// downloaded and parsed.
    #[arg(long, default_value_t = crate::source::Limits::DEFAULT.max_file_bytes >> 20)]
    pub unpack_max_file_mib: u64,
    /// Entries (files, directories, links) one source may hold.
    #[arg(long, default_value_t = crate::source::Limits::DEFAULT.max_entries)]
    pub unpack_max_entries: u64,
    /// Largest document read from a registry, in KiB: an image manifest or index, a page of a
    /// tag list, a referrers list. Counted as it arrives; past it the source is refused
    /// (LimitExceeded). The default is containerd's bound on manifests, the size registries
    /// must accept.
    #[arg(long, default_value_t = crate::source::registry::RegistryLimits::DEFAULT.max_document_bytes >> 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub registry_max_document_kib: u64,
    /// Tags read from one repository's tag list (a `semver` range), over all its pages; more
    /// is refused (LimitExceeded).
    #[arg(long, default_value_t = crate::source::registry::RegistryLimits::DEFAULT.max_tags as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub registry_max_tags: u64,
    /// Largest git ref advertisement read, in MiB (an ls-remote, and the start of every fetch;
    /// a repository advertising every pull request's refs needs a few MiB). Counted as it
    /// arrives; past it the connection is closed and the source refused (LimitExceeded).
    #[arg(long, default_value_t = crate::source::DEFAULT_GIT_MAX_ADVERTISEMENT_BYTES >> 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub git_max_advertisement_mib: u64,
}

impl UnpackFlags {
    /// `options` with the limits these flags set: what a source may unpack, what a registry
    /// may send, the largest git ref advertisement.
    pub fn bound(&self, options: crate::source::FetchOptions) -> crate::source::FetchOptions {
        crate::source::FetchOptions {
            limits: self.limits(),
            registry: self.registry_limits(),
            git_max_advertisement_bytes: self.git_max_advertisement_bytes(),
            ..options
        }
    }

    /// What these flags let a registry send.
    pub fn registry_limits(&self) -> crate::source::registry::RegistryLimits {
        crate::source::registry::RegistryLimits {
            max_document_bytes: self.registry_max_document_kib.max(1) << 10,
            max_tags: usize::try_from(self.registry_max_tags).unwrap_or(usize::MAX),
        }
    }

    /// The largest git ref advertisement these flags let a server send.
    pub fn git_max_advertisement_bytes(&self) -> u64 {
        self.git_max_advertisement_mib.max(1) << 20
    }

    /// The limits these flags set (GNU long-name and PAX records keep their fixed bound).
    pub fn limits(&self) -> crate::source::Limits {
        crate::source::Limits {
            max_total_bytes: self.unpack_max_mib.max(1) << 20,
            max_file_bytes: self.unpack_max_file_mib.max(1) << 20,
            max_entries: self.unpack_max_entries.max(1),
            ..crate::source::Limits::DEFAULT
        }
    }
}

impl FetchFlags {
    /// The executables `function` processors may run.
    pub fn function_policy(&self) -> crate::reconcile::functions::FunctionPolicy {
        crate::reconcile::functions::FunctionPolicy {
            allowed_exec: self.allow_function_exec.clone(),
            allowed_hosts: self.allow_function_host.clone(),
            ..Default::default()
        }
    }

    /// A fetcher over the cache these flags name.
    pub fn fetcher(&self) -> anyhow::Result<crate::source::Fetcher> {
        let dir = self
            .cache_dir
            .clone()
            .unwrap_or_else(|| fetch::dirs_cache().join("fetch"));
        let cache = crate::source::Cache::open(&dir, 4 * 1024 * 1024 * 1024)
            .with_context(|| format!("opening the cache at {}", dir.display()))?;
        Ok(crate::source::Fetcher::new(
            std::sync::Arc::new(cache),
            self.unpack.bound(crate::source::FetchOptions {
                plain_http_registries: self.plain_http_registries.clone(),
                egress: self.egress.policy(),
                ..Default::default()
            }),
        ))
    }
}

/// Runs `future` to completion on a fresh runtime.
pub fn block_on<T>(
    future: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(future)
}

/// The clap command, named for how the binary was invoked: `kubectl pallet` when run through a
/// `kubectl-pallet` link (kubectl's plugin mechanism), so help and errors show the right usage.
pub fn command_for(argv0: Option<&std::ffi::OsStr>) -> clap::Command {
    let invoked = argv0
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("pallet");
    let command = help::grouped(Cli::command());
    if invoked.starts_with("kubectl-pallet") {
        command.bin_name("kubectl pallet").name("kubectl-pallet")
    } else {
        command
    }
}

/// Answers a shell's completion request and exits, when the process was started for one.
pub fn complete_from_env() {
    completion::complete_from_env();
}

/// Parses the process's arguments (see [`command_for`]).
pub fn parse() -> Cli {
    use clap::FromArgMatches as _;
    let argv0 = std::env::args_os().next();
    let matches = command_for(argv0.as_deref()).get_matches();
    match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    }
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Install(args) => install::run(args),
        Command::Uninstall(args) => install::uninstall::run(args),
        Command::Check(args) => install::check::run(args),
        Command::Version(args) => install::version::run(args),
        Command::Get(args) => get::run(args),
        Command::Sets(args) => sets::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Tree(args) => tree::run(args),
        Command::Events(args) => events::run(args),
        Command::Crd(args) => {
            match args.kind {
                None => print!(
                    "{}---\n{}",
                    crate::api::crd_yaml()?,
                    crate::api::set_crd_yaml()?
                ),
                Some(CrdKind::BundleDeployment) => print!("{}", crate::api::crd_yaml()?),
                Some(CrdKind::BundleDeploymentSet) => print!("{}", crate::api::set_crd_yaml()?),
            }
            Ok(())
        }
        Command::Agent(args) => agent::run(*args),
        Command::Fetch(args) => fetch::run(args),
        Command::Render(args) => render::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Status(args) => ops::status(args),
        Command::History(args) => ops::history(args),
        Command::Rollback(args) if args.set => sets::rollback_set(args),
        Command::Rollback(args) => ops::rollback(args),
        Command::Retry(args) => ops::request(ops::Request::Retry, args),
        Command::Test(args) => test::run(args),
        Command::Reconcile(args) => ops::request(ops::Request::Reconcile, args),
        Command::Pause(args) => ops::pause(args),
        Command::Resume(args) => ops::resume(args),
        Command::Trace(args) => ops::trace(args),
        Command::Ui(args) => ui::run(*args),
        Command::Push(args) => push::run(args),
        Command::RenderSandbox(args) => {
            match crate::render_sandbox::child::run(
                args.memory_bytes,
                args.cpu_seconds,
                args.limited,
            ) {
                0 => Ok(()),
                code => std::process::exit(code.into()),
            }
        }
        Command::FunctionSandbox(args) => {
            match crate::render_sandbox::exec::run(
                &args.program,
                args.memory_bytes,
                args.cpu_seconds,
                std::time::Duration::from_millis(args.timeout_ms),
                args.limited,
            ) {
                0 => Ok(()),
                code => std::process::exit(code.into()),
            }
        }
        Command::Docs(DocsCommand::Generate { dir }) => {
            for path in crate::docs::write_pages(&dir, &Cli::command())? {
                eprintln!("wrote {}", path.display());
            }
            Ok(())
        }
        Command::Docs(DocsCommand::Man { dir }) => {
            crate::docs::write_man_pages(&dir, Cli::command())?;
            eprintln!("wrote the man pages into {}", dir.display());
            Ok(())
        }
        Command::Completion(args) => completion::print_registration(args.shell),
    }
}

/// Writes a command's output to stdout. A reader that went away (`pallet render | head`) ends
/// the output quietly instead of a panic.
pub fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// The error and its causes on one line, `outer: cause: cause`, leaving out a cause whose text
/// the message already holds (errors that print their source themselves would otherwise be
/// repeated: `X: X`).
pub fn error_message(err: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

#[cfg(test)]
mod error_message_tests {
    use super::error_message;

    #[derive(Debug, thiserror::Error)]
    #[error("render: {0}")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("chart x: bad")]
    struct Inner;

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let err = anyhow::Error::new(Outer(Inner)).context("rendering hello");
        assert_eq!(error_message(&err), "rendering hello: render: chart x: bad");
    }

    #[test]
    fn distinct_causes_are_all_printed() {
        let err = anyhow::anyhow!("disk full").context("writing the cache");
        assert_eq!(error_message(&err), "writing the cache: disk full");
    }
}

/// The command line's naming rule for namespaces, as the reference and the commands page state
/// it: `-n, --namespace` is the namespace of what the command acts on (kubectl's meaning);
/// `--agent-namespace` is the agent's namespace where a command needs it beside something else.
#[cfg(test)]
mod namespace_flag_tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, Command};

    /// Commands whose subject lives in a namespace they take with `-n, --namespace`: the traced
    /// object's (`trace`), the installation's, which is the agents' own (the rest).
    const NAMESPACE_OF_THE_SUBJECT: [&str; 6] =
        ["trace", "install", "uninstall", "check", "version", "agent"];

    #[test]
    fn namespace_flags_keep_one_meaning_per_name() {
        let cli = Cli::command();
        for sub in cli.get_subcommands().filter(|c| !c.is_hide_set()) {
            for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                match arg.get_long() {
                    Some("namespace") => assert!(
                        NAMESPACE_OF_THE_SUBJECT.contains(&sub.get_name()),
                        "`pallet {} --namespace` must be the namespace of what it acts on; \
                         the agent's namespace beside something else is --agent-namespace",
                        sub.get_name()
                    ),
                    Some("agent-namespace") => assert!(
                        help.contains("agent's namespace"),
                        "`pallet {} --agent-namespace` says what it is: {help}",
                        sub.get_name()
                    ),
                    Some(long) if help.starts_with("The agent's namespace") => panic!(
                        "`pallet {} --{long}` is the agent's namespace: spell it --agent-namespace",
                        sub.get_name()
                    ),
                    _ => {}
                }
                if arg.get_short() == Some('n') {
                    assert_eq!(arg.get_long(), Some("namespace"), "{}", sub.get_name());
                }
            }
        }
    }

    #[test]
    fn older_spellings_of_the_agent_namespace_still_parse() {
        let parsed = |line: &[&str]| Cli::try_parse_from(line).unwrap().command;
        for flag in ["--agent-namespace", "--namespace"] {
            match parsed(&["pallet", "plan", "-f", "bd.yaml", flag, "ops"]) {
                Command::Plan(args) => assert_eq!(args.namespace, "ops"),
                other => panic!("{other:?}"),
            }
            match parsed(&["pallet", "resume", "web", "--dry-run", flag, "ops"]) {
                Command::Resume(args) => assert_eq!(args.namespace, "ops"),
                other => panic!("{other:?}"),
            }
        }
        for flag in ["--agent-namespace", "--store-namespace"] {
            match parsed(&["pallet", "trace", "cm/x", "-n", "shop", flag, "ops"]) {
                Command::Trace(args) => {
                    assert_eq!(args.namespace.as_deref(), Some("shop"));
                    assert_eq!(args.store_namespace, "ops");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn test_timeout_is_a_duration_and_bare_seconds_still_work() {
        let timeout =
            |value: &str| match Cli::try_parse_from(["pallet", "test", "web", "--timeout", value])
                .unwrap()
                .command
            {
                Command::Test(args) => args.timeout,
                other => panic!("{other:?}"),
            };
        assert_eq!(timeout("90s").as_secs(), 90);
        assert_eq!(timeout("2m").as_secs(), 120);
        assert_eq!(timeout("45").as_secs(), 45);
        assert!(Cli::try_parse_from(["pallet", "test", "web", "--timeout", "soon"]).is_err());
    }
}
