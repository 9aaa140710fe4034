//! End-to-end: hostile content never takes the agent down. Each case runs against a
//! leader-elected agent on the local control plane with a healthy BundleDeployment beside it
//! (see `support/hostile.rs` for every property asserted and the figures printed): the
//! hostile bundle gets a clear condition naming what was refused, and the agent, its Lease and
//! its neighbour carry on.
//!
//! The charts are made here, small: what makes them hostile is what they ask the renderer to
//! do, not their size.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/hostile.rs"]
mod hostile;
mod support;

use hostile::{chart_files, git_case, Expected, Hostile};

const CONFIG_MAP: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-ok\ndata:\n";

const BUDGET: &str = "RenderBudgetExceeded";

fn expected(parts: &[&str]) -> Expected {
    Expected {
        reason: BUDGET,
        message_parts: parts.iter().map(|p| p.to_string()).collect(),
    }
}

/// Runs one helm case from git against a new harness.
async fn helm_case(test: &str, template: &str, values: &str, parts: &[&str], agent_args: &[&str]) {
    let mut harness = Hostile::start(test, agent_args).await;
    let case = git_case(
        test.trim_start_matches("hostile-"),
        &harness.namespace.clone(),
        chart_files(template, values),
        expected(parts),
    );
    harness.run(case).await;
}

#[tokio::test]
async fn a_self_recursive_tpl_is_refused() {
    helm_case(
        "hostile-tpl",
        &format!("{CONFIG_MAP}  a: {{{{ tpl .Values.x . }}}}\n"),
        "x: \"{{ tpl .Values.x . }}\"\n",
        &[
            "template call depth",
            "hostile/templates/cm.yaml",
            "limit of 64",
        ],
        &[],
    )
    .await;
}

#[tokio::test]
async fn deeply_nested_parentheses_and_ifs_are_refused() {
    let parens = format!(
        "{CONFIG_MAP}  a: {{{{ {}1{} }}}}\n",
        "(".repeat(2000),
        ")".repeat(2000)
    );
    let ifs = format!(
        "{CONFIG_MAP}{}  a: b\n{}",
        "{{ if true }}".repeat(1000),
        "{{ end }}".repeat(1000)
    );
    let mut harness = Hostile::start("hostile-nesting", &[]).await;
    for (name, template, what) in [("parens", parens, "parentheses"), ("ifs", ifs, "if, with")] {
        let case = git_case(
            name,
            &harness.namespace.clone(),
            chart_files(&template, ""),
            expected(&["template nesting depth", "hostile/templates/cm.yaml", what]),
        );
        harness.run(case).await;
    }
}

#[tokio::test]
async fn deeply_nested_values_are_refused() {
    let mut harness = Hostile::start("hostile-values", &[]).await;
    // values.yaml 100,000 deep: refused by the reader's depth budget.
    let deep = format!("x: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let case = git_case(
        "file",
        &harness.namespace.clone(),
        chart_files(&format!("{CONFIG_MAP}  a: b\n"), &deep),
        expected(&["values nesting depth", "values.yaml"]),
    );
    harness.run(case).await;
    // A value nested 100,000 deep built by the template itself: held to the same depth budget
    // when it is serialised, named in the condition.
    let built = format!(
        "{{{{- $x := dict }}}}{{{{- range until 100000 }}}}{{{{ $x = dict \"a\" $x }}}}{{{{- end }}}}{CONFIG_MAP}  a: {{{{ toJson $x | len | quote }}}}\n"
    );
    let case = git_case(
        "built",
        &harness.namespace.clone(),
        chart_files(&built, ""),
        expected(&[
            "value nesting depth",
            "limit of 64",
            "hostile/templates/cm.yaml",
        ]),
    );
    harness.run(case).await;
}

#[tokio::test]
async fn huge_repeat_until_and_seq_are_refused() {
    let mut harness = Hostile::start("hostile-sizes", &[]).await;
    for (name, call, budget, value) in [
        (
            "repeat",
            "repeat 3000000000 \"x\"",
            "string size (bytes)",
            "3000000000 (from repeat 3000000000",
        ),
        (
            "until",
            "until 3000000000",
            "list size (items)",
            "3000000000 (from until 3000000000)",
        ),
        (
            "seq",
            "seq 3000000000",
            "list size (items)",
            "3000000001 (from seq 3000000000)",
        ),
    ] {
        let case = git_case(
            name,
            &harness.namespace.clone(),
            chart_files(
                &format!("{CONFIG_MAP}  a: {{{{ {call} | len | quote }}}}\n"),
                "",
            ),
            expected(&[budget, value, "hostile/templates/cm.yaml"]),
        );
        harness.run(case).await;
    }
}

#[tokio::test]
async fn nested_loops_that_would_run_for_hours_are_refused() {
    helm_case(
        "hostile-loops",
        &format!("{CONFIG_MAP}{{{{ range until 100000 }}}}{{{{ range until 100000 }}}}{{{{ end }}}}{{{{ end }}}}  a: b\n"),
        "",
        &["render steps", "hostile/templates/cm.yaml", "limit of 1000000"],
        &[],
    )
    .await;
}

#[tokio::test]
async fn a_loop_that_spends_cpu_without_steps_is_ended_by_the_sandbox() {
    // Few steps, each hashing 3 MB: hours of CPU. The render's process is ended at its CPU
    // limit (5 s here), the agent and its neighbour carry on meanwhile.
    helm_case(
        "hostile-cpu",
        &format!("{CONFIG_MAP}{{{{- $s := repeat 3000000 \"x\" }}}}{{{{- range until 100000 }}}}{{{{ $_ := sha256sum $s }}}}{{{{- end }}}}\n  a: b\n"),
        "",
        &["render CPU time", "limit of 5s"],
        &["--render-cpu-seconds", "5"],
    )
    .await;
}

#[tokio::test]
async fn output_bombs_are_refused() {
    let mut harness = Hostile::start("hostile-output", &[]).await;
    // 20,000 lines of 2,000 bytes: 40 MB of text, past the 32 MiB output budget.
    let line = "x".repeat(1998);
    let text =
        format!("{CONFIG_MAP}  a: |\n{{{{- range until 20000 }}}}\n    {line}{{{{- end }}}}\n");
    let case = git_case(
        "text",
        &harness.namespace.clone(),
        chart_files(&text, ""),
        expected(&[
            "rendered output (bytes)",
            "hostile/templates/cm.yaml",
            "limit of 33554432",
        ]),
    );
    harness.run(case).await;
    // Twenty strings of 30 MB kept in a list: each within the string budget, 600 MB together,
    // past the render's memory limit.
    let memory = format!("{CONFIG_MAP}{{{{- $all := list }}}}{{{{- range until 20 }}}}{{{{ $all = append $all (repeat 30000000 \"x\") }}}}{{{{- end }}}}\n  a: {{{{ len $all | quote }}}}\n");
    let case = git_case(
        "memory",
        &harness.namespace.clone(),
        chart_files(&memory, ""),
        expected(&["render memory (bytes)", "limit of 268435456"]),
    );
    harness.run(case).await;
}

// ---- Archives built to inflate, loop or escape once unpacked or loaded ----
//
// These come from `testdata/malicious/` (made by its `generate.py`, each a few hundred bytes to
// about 100 KiB) and a git repository made here. The agent runs with --unpack-max-mib 64 (the
// flag's default is 256); the other budgets keep their defaults.

const UNPACK_ARGS: &[&str] = &["--unpack-max-mib", "64"];

fn corpus(file: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/malicious")
        .join(file);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{file}: {e} (run testdata/malicious/generate.py)"))
}

/// A tar+gzip of `files`, each under `prefix`.
fn targz(prefix: &str, files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (path, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, format!("{prefix}{path}"), &data[..])
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

fn refused(reason: &'static str, parts: &[&str]) -> Expected {
    Expected {
        reason,
        message_parts: parts.iter().map(|p| p.to_string()).collect(),
    }
}

/// A helm bundle from an HTTP archive: the benign chart first, then `hostile` at the same URL.
fn http_case(name: &str, namespace: &str, hostile: Vec<u8>, expected: Expected) -> hostile::Case {
    let fixtures = support::Fixtures::load();
    let path = format!("{}/bundle.tar.gz", cluster::unique_name(name));
    let url = fixtures
        .http_plain()
        .url_for(&fixtures.put_file(&path, &targz("", &hostile::benign_files())));
    hostile::Case {
        name: name.to_string(),
        spec: serde_json::json!({
            "installNamespace": namespace,
            "sources": [{"kind": "http", "http": {"url": url}}],
            "format": "helm",
        }),
        make_hostile: Box::new(move || {
            support::Fixtures::load().put_file(&path, &hostile);
        }),
        expected,
    }
}

/// Asserts the BundleDeployment of `case` in `harness` reports its sources refused in Unpacked.
async fn assert_unpacked_false(harness: &Hostile, case: &str, reason: &str, part: &str) {
    let api: kube::Api<pallet::api::BundleDeployment> = kube::Api::all(harness.client.clone());
    let name = format!("{}-{case}", harness.label);
    let bd = api.get(&name).await.unwrap();
    let conditions = bd.status.map(|s| s.conditions).unwrap_or_default();
    let unpacked = pallet::api::conditions::find(&conditions, "Unpacked")
        .unwrap_or_else(|| panic!("{name}: no Unpacked condition"));
    assert!(
        unpacked.status == "False" && unpacked.reason == reason && unpacked.message.contains(part),
        "{name}: Unpacked {unpacked:?}"
    );
    println!(
        "archive case {case}: Unpacked=False {reason}: {}",
        unpacked.message
    );
}

#[tokio::test]
async fn archives_that_inflate_while_unpacked_are_refused() {
    let mut harness = Hostile::start("hostile-archives", UNPACK_ARGS).await;
    let over_64_mib = "per-source unpack limit (--unpack-max-mib) of 67108864 bytes";
    for (file, name, parts) in [
        // 1 MiB and 300 hardlinks to it: 301 MiB once copied.
        (
            "hardlink-amplification.tar.gz",
            "hardlinks",
            vec!["bundle.tar.gz", "refused file link-", over_64_mib],
        ),
        // 100 MiB header records, refused before they are read.
        (
            "pax-record-bomb.tar.gz",
            "pax",
            vec![
                "bundle.tar.gz",
                "PAX extended header record",
                "104857600 bytes is over the header record limit of 65536 bytes",
            ],
        ),
        (
            "gnu-longname-bomb.tar.gz",
            "longname",
            vec![
                "GNU long name record",
                "104857600 bytes is over the header record limit",
            ],
        ),
        // 100 MiB of data in an entry the unpacker skips: inflated, so counted.
        (
            "skipped-entry-bomb.tar.gz",
            "skipped",
            vec!["refused entry ./", "bytes inflated", over_64_mib],
        ),
    ] {
        let case = http_case(
            name,
            &harness.namespace.clone(),
            corpus(file),
            refused("LimitExceeded", &parts),
        );
        harness.run(case).await;
        assert_unpacked_false(&harness, name, "LimitExceeded", parts[parts.len() - 1]).await;
    }
}

#[tokio::test]
async fn charts_that_inflate_or_loop_once_loaded_are_refused() {
    let mut harness = Hostile::start("hostile-chart-archives", UNPACK_ARGS).await;
    // A 923-byte chart whose subchart .tgz inflates to 200 MiB: refused on the entry's declared
    // size, past the loader's 128 MiB, before any of it is read.
    let case = http_case(
        "subchart",
        &harness.namespace.clone(),
        corpus("subchart-bomb.tar.gz"),
        refused(
            BUDGET,
            &[
                "charts/bomb-0.1.0.tgz",
                "bomb/files/zeros (209715200 bytes)",
                "chart size once loaded",
                "limit of 134217728",
            ],
        ),
    );
    harness.run(case).await;
    // Two links to their own directory: 2^40 paths to a loader that follows them.
    let case = http_case(
        "loop",
        &harness.namespace.clone(),
        corpus("dir-symlink-loop.tar.gz"),
        refused(
            "InvalidConfig",
            &["templates/a is a symlink to a directory; directory links are not followed"],
        ),
    );
    harness.run(case).await;
}

#[tokio::test]
async fn a_chart_link_out_of_its_stripped_top_directory_is_refused() {
    let mut harness = Hostile::start("hostile-stripped-link", UNPACK_ARGS).await;
    let fixtures = support::Fixtures::load();
    let repo = cluster::unique_name("stripped-repo");
    let index = |versions: &[&str]| {
        let entries: String = versions
            .iter()
            .map(|v| format!("  - name: evil\n    version: {v}\n    urls: [evil-{v}.tgz]\n"))
            .collect();
        format!("apiVersion: v1\nentries:\n  evil:\n{entries}")
    };
    fixtures.put_file(
        &format!("{repo}/evil-0.1.0.tgz"),
        &targz("evil/", &hostile::benign_files()),
    );
    fixtures.put_file(&format!("{repo}/index.yaml"), index(&["0.1.0"]).as_bytes());
    let url = fixtures.http_plain().url_for(&format!("/{repo}"));
    let hostile_repo = repo.clone();
    let case = hostile::Case {
        name: "stripped".into(),
        spec: serde_json::json!({
            "installNamespace": harness.namespace.clone(),
            "sources": [{"kind": "helmRepository", "helmRepository": {"url": url, "chart": "evil"}}],
            "format": "helm",
        }),
        make_hostile: Box::new(move || {
            let fixtures = support::Fixtures::load();
            fixtures.put_file(
                &format!("{hostile_repo}/evil-0.2.0.tgz"),
                &corpus("stripped-link.tgz"),
            );
            fixtures.put_file(
                &format!("{hostile_repo}/index.yaml"),
                index(&["0.1.0", "0.2.0"]).as_bytes(),
            );
        }),
        expected: refused(
            "UnsafeContent",
            &[
                "helmRepository",
                "unsafe content at evil/up",
                "once the chart's top directory evil/ is stripped",
            ],
        ),
    };
    harness.run(case).await;
    assert_unpacked_false(&harness, "stripped", "UnsafeContent", "evil/up").await;
}

#[tokio::test]
async fn a_git_blob_bomb_is_refused_by_its_declared_size() {
    let mut harness = Hostile::start("hostile-git-blob", UNPACK_ARGS).await;
    // 96 MiB of zeros: a pack of about 100 KiB, over the default 64 MiB per file.
    let mut files = hostile::benign_files();
    files.push(("big.bin".into(), vec![0u8; 96 << 20]));
    let case = hostile::git_case(
        "blob",
        &harness.namespace.clone(),
        files,
        refused(
            "LimitExceeded",
            &[
                "git http://",
                "refused file big.bin: 100663296 bytes",
                "per-file limit (--unpack-max-file-mib) of 67108864 bytes",
            ],
        ),
    );
    harness.run(case).await;
    assert_unpacked_false(&harness, "blob", "LimitExceeded", "big.bin").await;
}
