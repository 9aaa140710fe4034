//! The case file of kustomize's end-to-end suite (made by `tools/kustomize-cases.sh`), which
//! cases the kustomize format can take, and building and judging one.

mod compare;

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use compare::{expected_order, Verdict};

/// The case file.
#[derive(Deserialize)]
pub struct CaseFile {
    /// One build each.
    pub cases: Vec<Case>,
    /// Tests that recorded no build here (skipped or failed before building).
    #[serde(default)]
    pub unbuilt: Vec<Unbuilt>,
}

/// One build of one Go test, with what the test expects of it.
#[derive(Deserialize)]
pub struct Case {
    /// `TestName`, `TestName/subtest`, `TestName@2` for a test's second build.
    pub name: String,
    /// The Go test's outcome here: `pass`, `fail`, `skip`.
    pub outcome: String,
    /// The directory built, relative to the files' root (`""` for the root).
    pub dir: String,
    /// Text files by path relative to the root; `${ROOT}` stands for the root's absolute path.
    pub files: BTreeMap<String, String>,
    /// Other files, base64.
    #[serde(default)]
    pub binary: BTreeMap<String, String>,
    /// Every directory (so that empty ones exist).
    #[serde(default)]
    pub dirs: Vec<String>,
    /// The build's options, as krusty.Options set them.
    pub options: Options,
    /// Plugins the test prepared (`group/version/kind`).
    #[serde(default)]
    pub plugins: Vec<String>,
    /// The YAML the test compares the output with.
    pub expected: Option<String>,
    /// The test rewrote the output before comparing it.
    #[serde(default)]
    pub tweaked: bool,
    /// The build failed with this error (and the test passed, so it expected one).
    pub error: Option<String>,
}

/// krusty.Options, flattened (absent = Go's zero value).
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub struct Options {
    /// `none` (the harness's default: input order), `legacy`, `unspecified` (the CLI's).
    pub reorder: String,
    /// `LoadRestrictionsRootOnly` (the CLI's default) or `LoadRestrictionsNone`.
    pub load_restrictions: String,
    /// The CLI's `--enable-managedby-label`.
    pub add_managedby_label: bool,
    /// `PluginRestrictionsNone` when plugins are enabled.
    pub plugin_restrictions: String,
    /// KRM functions may run executables.
    pub fn_exec: bool,
    /// KRM function containers get the network.
    pub fn_network: bool,
    /// KRM function containers' mounts.
    pub fn_mounts: Vec<String>,
    /// Helm is enabled.
    pub helm_enabled: bool,
}

/// A test that recorded no build here.
#[derive(Deserialize)]
pub struct Unbuilt {
    /// `skip` or `fail`.
    pub outcome: String,
    /// Its first message (`file.go:123: ...`).
    #[serde(default)]
    pub note: String,
}

/// The case file, or `None` (after saying how to make it) when it has not been made.
pub fn load_cases() -> Option<CaseFile> {
    let cache = std::env::var_os("PALLET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").expect("HOME is set")).join(".cache/pallet")
        });
    let path = cache.join("kustomize-cases/krusty.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        // The suite's own runner (tools/test.sh) makes the file first: there, missing is a
        // failure, not a skip.
        assert!(
            std::env::var_os("PALLET_KRUSTY_REQUIRED").is_none(),
            "no kustomize case file at {}: run tools/kustomize-cases.sh",
            path.display()
        );
        println!(
            "kustomize krusty suite skipped: no case file at {}; make it with \
             `tools/kustomize-cases.sh` from the repository root (needs Go; the first run \
             fetches the test dependencies through the Go module proxy)",
            path.display()
        );
        return None;
    };
    Some(
        serde_json::from_str(&text).expect("the case file is what tools/kustomize-cases.sh writes"),
    )
}

/// Why the format cannot take this case, or `None` when it is ported.
pub fn not_ported(case: &Case) -> Option<&'static str> {
    let o = &case.options;
    let plugins_enabled = o.plugin_restrictions == "PluginRestrictionsNone";
    let kustomizations: Vec<&String> = case
        .files
        .iter()
        .filter(|(path, _)| is_kustomization_file(path))
        .map(|(_, text)| text)
        .collect();
    let function_config = case.files.values().any(|t| {
        t.contains("config.kubernetes.io/function") || t.contains("config.k8s.io/function")
    });
    if !case.plugins.is_empty()
        || o.fn_exec
        || o.fn_network
        || !o.fn_mounts.is_empty()
        || (plugins_enabled && function_config)
    {
        return Some("plugins (Go, exec, container or KRM function)");
    }
    if kustomizations.iter().any(|k| names_remote(k)) {
        return Some("remote loading");
    }
    let helm = kustomizations
        .iter()
        .any(|k| k.contains("helmCharts:") || k.contains("helmChartInflationGenerator:"))
        || case
            .files
            .values()
            .any(|t| t.contains("kind: HelmChartInflationGenerator"));
    if helm && o.helm_enabled {
        return Some("helm");
    }
    if climbs_above_root(case) {
        return Some("a path climbs above the in-memory root (`/..` is `/` there)");
    }
    if o.load_restrictions == "LoadRestrictionsNone" {
        return Some("option: load restrictor none");
    }
    if o.add_managedby_label {
        return Some("option: managed-by label");
    }
    if case.tweaked {
        return Some("output rewritten by the test before comparing");
    }
    if case.outcome != "pass" {
        return Some("the Go test fails or skips here");
    }
    if case.expected.is_none() && case.error.is_none() {
        return Some("the test checks parts of the output only");
    }
    None
}

/// The reason a test that recorded no build is not ported.
pub fn unbuilt_reason(test: &Unbuilt) -> String {
    if test.note.contains("helm") {
        "helm".to_string()
    } else {
        format!("no build recorded (the Go test {}s here)", test.outcome)
    }
}

fn is_kustomization_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    matches!(
        name,
        "kustomization.yaml" | "kustomization.yml" | "Kustomization"
    )
}

/// Whether a kustomization names a remote resource, base, component or schema.
fn names_remote(kustomization: &str) -> bool {
    kustomization.lines().any(|line| {
        let item = line.trim_start();
        let item = item
            .strip_prefix("- ")
            .or_else(|| item.strip_prefix("path:"))
            .or_else(|| item.strip_prefix("repo:"))
            .map(|rest| rest.trim().trim_matches(|c| c == '"' || c == '\''));
        item.is_some_and(|v| {
            v.contains("://")
                || v.starts_with("git@")
                || v.starts_with("git::")
                || v.starts_with("github.com/")
        })
    })
}

/// Whether a kustomization names a path (`- ../x`, `path: ../x`) above the root of the test's
/// file system: in memory, where `/..` is `/`, that still finds files; on disk it cannot.
fn climbs_above_root(case: &Case) -> bool {
    case.files
        .iter()
        .filter(|(path, _)| is_kustomization_file(path))
        .any(|(path, text)| {
            let depth = path.matches('/').count();
            text.lines().any(|line| {
                let item = line.trim_start();
                let item = item
                    .strip_prefix("- ")
                    .or_else(|| item.strip_prefix("path:"))
                    .map(|rest| rest.trim().trim_matches(|c| c == '"' || c == '\''));
                item.is_some_and(|v| {
                    let mut level = depth as i64;
                    for part in v.split('/') {
                        match part {
                            ".." => level -= 1,
                            "." | "" => {}
                            _ => level += 1,
                        }
                        if level < 0 {
                            return true;
                        }
                    }
                    false
                })
            })
        })
}

/// What builds a case: the kustomize format, or the oracle.
pub enum Builder {
    /// `pallet_formats::kustomize::build`.
    Engine,
    /// `kustomize build DIR` with the CLI's defaults.
    Oracle(PathBuf),
}

impl Builder {
    /// The oracle; fails (never skips) with instructions when it has not been built.
    pub fn oracle() -> Self {
        let cache = std::env::var_os("PALLET_CACHE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var("HOME").expect("HOME is set")).join(".cache/pallet")
            });
        let bin = cache.join("bin/kustomize");
        assert!(
            bin.exists(),
            "the kustomize oracle is not built at {}: run `tools/kustomize.sh build`",
            bin.display()
        );
        Builder::Oracle(bin)
    }

    /// Builds `dir` (relative to `tree`): the objects, or the error's text.
    fn build(&self, tree: &Path, dir: &str) -> Result<Vec<Value>, String> {
        match self {
            Builder::Engine => pallet_formats::kustomize::build(tree, dir)
                .map(|objects| {
                    objects
                        .into_iter()
                        .map(|o| Value::Object(o.into_body()))
                        .collect()
                })
                .map_err(|e| e.to_string()),
            Builder::Oracle(bin) => {
                let out = Command::new(bin)
                    .arg("build")
                    .arg(tree.join(dir))
                    .output()
                    .map_err(|e| format!("running kustomize: {e}"))?;
                if !out.status.success() {
                    return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
                }
                compare::split_docs(&String::from_utf8_lossy(&out.stdout))
                    .map_err(|e| format!("kustomize's output is not YAML to this reader: {e}"))
            }
        }
    }
}

/// Writes the case's tree into `root`.
fn write_tree(case: &Case, root: &Path) {
    use base64::Engine as _;
    let root_text = root.to_string_lossy();
    for dir in &case.dirs {
        std::fs::create_dir_all(root.join(dir)).expect("creating a directory");
    }
    let write = |path: &str, bytes: &[u8]| {
        let path = root.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("creating a directory");
        }
        std::fs::write(&path, bytes).expect("writing a file");
    };
    for (path, text) in &case.files {
        write(path, text.replace("${ROOT}", &root_text).as_bytes());
    }
    for (path, data) in &case.binary {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("the case file's base64");
        write(path, &bytes);
    }
}

/// Builds one ported case and judges the result: `Err` says how it differs.
pub fn judge(case: &Case, builder: &Builder) -> Result<(), String> {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    write_tree(case, tmp.path());
    let built = builder.build(tmp.path(), &case.dir);
    match (&case.expected, built) {
        (None, Err(_)) => Ok(()),
        (None, Ok(objects)) => Err(format!(
            "an error was expected ({}), the build gave {} objects",
            first_line(case.error.as_deref().unwrap_or("")),
            objects.len()
        )),
        (Some(_), Err(error)) => Err(format!("build failed: {}", first_line(&error))),
        (Some(expected), Ok(actual)) => {
            let expected = compare::split_docs(expected)
                .map_err(|e| format!("the expected YAML is not YAML to this reader: {e}"))?;
            let expected = expected_order(case, expected);
            match compare::compare(&expected, &actual) {
                Verdict::Equal => Ok(()),
                Verdict::Differ(paths) => Err(paths.join("; ")),
            }
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}
