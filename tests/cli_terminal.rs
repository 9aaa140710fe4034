//! Object text printed for a terminal is shown, never acted on: a condition message holding ANSI
//! escape sequences and control characters (as a chart's error or a server's answer may) is
//! printed escaped by `pallet status` and `pallet history`, and kept as it is in `-o json`.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use cli::{create_bd, delete_bd, pallet_ok, write_status};
use serde_json::json;

#[tokio::test]
async fn terminal_output_escapes_what_would_act_on_the_terminal() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let name = support::unique_name("cli-escape");
    create_bd(
        &client,
        &name,
        json!({"format": "plain", "installNamespace": "apps",
               "sources": [{"kind": "http", "http": {"url": "http://127.0.0.1:1/bundle.yaml"}}]}),
        json!({}),
    )
    .await;
    // Clears the screen, sets the window title, rewrites the line, reverses what follows.
    let hostile = "failed\u{1b}[2J\u{1b}]0;owned\u{7}\rOK \u{202e}txt.exe";
    write_status(
        &client,
        &name,
        json!({
            "conditions": [{"type": "Ready", "status": "False", "reason": "RenderFailed",
                            "message": hostile, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "revisions": [{"number": 1, "generation": 1, "digest": format!("sha256:{}", "a".repeat(64)),
                           "phase": "Failed", "objects": 1, "message": hostile,
                           "appliedAt": "2026-01-01T00:00:00Z", "sources": []}],
        }),
    )
    .await;

    let status = pallet_ok(&["status", &name]);
    for raw in ['\u{1b}', '\u{7}', '\r', '\u{202e}'] {
        assert!(!status.contains(raw), "{raw:?} printed raw: {status:?}");
    }
    assert!(
        status.contains("failed\\x1b[2J\\x1b]0;owned\\x07\\x0dOK \\u{202e}txt.exe"),
        "{status}"
    );
    let history = pallet_ok(&["history", &name]);
    assert!(!history.contains('\u{1b}'), "{history:?}");

    // Machine output is data: exactly what the object holds.
    let json: serde_json::Value =
        serde_json::from_str(&pallet_ok(&["status", &name, "-o", "json"])).unwrap();
    assert_eq!(json["status"]["conditions"][0]["message"], hostile);
    delete_bd(&client, &name).await;
}
