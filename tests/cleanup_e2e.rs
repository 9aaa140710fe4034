//! The tests' own cleanup: a BundleDeployment created with the shared helpers is removed when
//! the test that created it ends, even when it fails, and even when its agent, gone with the
//! test, can no longer release its finalizer (tests/support/cluster.rs,
//! `track_bundle_deployment`; tools/test-leftovers.sh checks nothing is left after the suite).

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::time::Duration;

use agent::Agent;
use kube::api::Api;
use pallet::api::BundleDeployment;
use serde_json::json;

#[tokio::test]
async fn a_failing_test_leaves_no_bundle_deployment_behind() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let name = support::unique_name("cleanup");
    // A thread stands for a test that fails: it starts an agent, creates a BundleDeployment the
    // agent holds with its finalizer, then panics (its agent killed as the test unwinds).
    let failing = {
        let name = name.clone();
        std::thread::Builder::new()
            .name(format!("{name}-test"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let client = cluster::client().await;
                    let _agent = Agent::start(&name);
                    agent::apply_bd(
                        &client,
                        &name,
                        json!({"format": "plain", "sources": [{"kind": "http",
                            "http": {"url": "http://127.0.0.1:9/bundle.yaml"}}]}),
                    )
                    .await;
                    let bds: Api<BundleDeployment> = Api::all(client.clone());
                    cluster::poll_until("the agent's finalizer", Duration::from_secs(60), || {
                        let bds = bds.clone();
                        let name = name.clone();
                        async move {
                            let bd = bds.get(&name).await.map_err(|e| e.to_string())?;
                            if bd.metadata.finalizers.unwrap_or_default().is_empty() {
                                Err("no finalizer yet".into())
                            } else {
                                Ok(())
                            }
                        }
                    })
                    .await;
                    panic!("the test fails with its BundleDeployment still there");
                })
            })
            .unwrap()
    };
    assert!(failing.join().is_err(), "the stand-in test panicked");
    // By the time its thread has ended, the BundleDeployment is gone.
    let left = Api::<BundleDeployment>::all(client.clone())
        .get_opt(&name)
        .await
        .unwrap();
    assert!(
        left.is_none(),
        "left behind: {:?}",
        left.map(|bd| bd.metadata)
    );
}
