//! `pallet test NAME`: asks the agent to run the chart's `test` hooks against the active
//! revision (annotation `pallet.dev/requested-test`), waits for the run and prints each hook's
//! result; exits non-zero when a hook failed.

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use serde_json::json;

use super::ops::{get_bd, patch_bd, token};
use super::KubeArgs;
use crate::api::{HookPhase, HookRequest, REQUESTED_TEST_ANNOTATION};

/// Flags of `pallet test`.
#[derive(Args, Debug)]
pub struct TestArgs {
    /// The BundleDeployment (a helm chart).
    pub name: String,
    /// How long to wait for the tests: a duration (`90s`, `5m`; a bare number is seconds).
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_positive_arg)]
    pub timeout: Duration,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Asks the agent to run the test hooks of helm BundleDeployment `name`; returns the request's
/// annotation value.
pub(crate) async fn request_tests(client: &kube::Client, name: &str) -> anyhow::Result<String> {
    let bd = get_bd(client, name).await?;
    if bd.spec.format != crate::api::BundleFormat::Helm {
        bail!("{name} is not a helm chart: it has no test hooks");
    }
    let value = token();
    patch_bd(
        client,
        name,
        &json!({"metadata": {"annotations": {REQUESTED_TEST_ANNOTATION: value}}}),
    )
    .await?;
    Ok(value)
}

/// Runs `pallet test`.
pub fn run(args: TestArgs) -> anyhow::Result<()> {
    super::block_on(async {
        let client = args.kube.client().await?;
        let value = request_tests(&client, &args.name).await?;
        tprintln!(
            "requested the tests of {} ({REQUESTED_TEST_ANNOTATION}={value})",
            args.name
        );
        let deadline = Instant::now() + args.timeout;
        let run = loop {
            let bd = get_bd(&client, &args.name).await?;
            let run = bd.status.and_then(|s| s.test);
            match run {
                Some(run)
                    if run.request.as_deref() == Some(value.as_str())
                        && run.phase != HookPhase::Running =>
                {
                    break run
                }
                last if Instant::now() >= deadline => {
                    return Err(super::exit::timed_out(format!(
                        "timed out after {}s waiting for the tests of {} (last: {}); is the agent running?",
                        args.timeout.as_secs(),
                        args.name,
                        last.map(|r| describe(&r)).unwrap_or_else(|| "none".into())
                    )))
                }
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        };
        print!("{}", report(&run));
        if run.phase != HookPhase::Succeeded {
            bail!(
                "the tests of {} failed: {}",
                args.name,
                run.message.as_deref().unwrap_or("no detail")
            );
        }
        Ok(())
    })
}

fn describe(run: &HookRequest) -> String {
    format!("revision {}, {:?}", run.revision, run.phase)
}

/// One line per hook (`TEST  Pod  ns/name  Succeeded  message`), then the run's result.
pub fn report(run: &HookRequest) -> String {
    let mut out = format!(
        "revision {}: {} test hooks\n",
        run.revision,
        run.hooks.len()
    );
    for hook in &run.hooks {
        let object = &hook.object;
        out.push_str(&format!(
            "{:<10} {:<6} {}/{}  {:?}{}\n",
            hook.event,
            object.kind,
            object.namespace,
            object.name,
            hook.phase,
            hook.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    }
    out.push_str(&format!(
        "result: {:?}{}\n",
        run.phase,
        run.message
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    ));
    out
}
