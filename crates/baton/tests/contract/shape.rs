//! The crate's shape, checked on its own sources: top-level modules import only modules
//! below them (`docs/architecture.md` lists the layers), no file has more than 500 lines
//! of non-test code, no function more than 100, and no comment cites a document outside
//! the repository.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, bottom up: a module may use those before it.
const LAYERS: [&str; 11] = [
    "util",
    "id",
    "policy",
    "error",
    "report",
    "observe",
    "orchestrator",
    "onion",
    "engine",
    "builder",
    "tower",
];

const MAX_FILE_LINES: usize = 500;
const MAX_FN_LINES: usize = 100;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The library's source files that are not tests (test files live in `tests/` folders or
/// are named `*_tests.rs`), with their text.
fn sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .expect("the source folder")
            .map(|e| e.expect("an entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != "tests" {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") && !name.ends_with("_tests.rs") {
                let text = fs::read_to_string(&path).expect("a source file");
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&src(), &mut out);
    out
}

/// `text` without its `#[cfg(test)]` modules (inline ones; those in files of their own are
/// not read at all).
fn without_tests(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let cfg_test = line.trim() == "#[cfg(test)]";
        let next = lines.peek().map(|l| l.trim()).unwrap_or("");
        if cfg_test && next.starts_with("mod ") && next.ends_with('{') {
            let indent = line.len() - line.trim_start().len();
            let close = format!("{}}}", " ".repeat(indent));
            for inner in lines.by_ref() {
                if inner == close {
                    break;
                }
            }
            continue;
        }
        out.push(line);
    }
    out
}

/// The code of a line, without its comment (doc comments included).
fn code(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

fn top_module(path: &Path) -> String {
    let rel = path.strip_prefix(src()).expect("under src");
    let first = rel.components().next().expect("a component");
    let first = first.as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

#[test]
fn modules_import_only_the_layers_below_them() {
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut up = BTreeMap::new();
    for (path, text) in sources() {
        let me = top_module(&path);
        let Some(mine) = rank(&me) else {
            assert_eq!(me, "lib", "{} is in no layer", path.display());
            continue;
        };
        for line in without_tests(&text) {
            let code = code(line);
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if let Some(theirs) = rank(&name) {
                    if theirs > mine {
                        up.insert(
                            format!("{} -> {name}", path.display()),
                            line.trim().to_owned(),
                        );
                    }
                }
            }
        }
    }
    assert!(up.is_empty(), "imports that point up: {up:#?}");
}

#[test]
fn no_file_or_function_is_too_long() {
    let mut long = Vec::new();
    for (path, text) in sources() {
        let lines = without_tests(&text);
        if lines.len() > MAX_FILE_LINES {
            long.push(format!("{}: {} lines", path.display(), lines.len()));
        }
        // rustfmt closes a function at the indentation it opened it. A signature that ends
        // in `;` before any `{` is a declaration (a trait's), not a function.
        let mut open: Option<(usize, String, &str)> = None;
        let mut body = false;
        for (n, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let indent = &line[..line.len() - trimmed.len()];
            if open.is_some() && !body {
                if code(line).contains('{') {
                    body = true;
                } else if code(line).trim_end().ends_with(';') {
                    open = None;
                    continue;
                }
            }
            match &open {
                None => {
                    let is_fn = code(trimmed).contains("fn ")
                        && [
                            "fn ",
                            "pub fn ",
                            "pub(crate) fn ",
                            "pub(super) fn ",
                            "async fn ",
                            "pub async fn ",
                            "pub(crate) async fn ",
                            "pub(super) async fn ",
                            "const fn ",
                            "pub const fn ",
                            "pub(crate) const fn ",
                            "unsafe fn ",
                            "pub(crate) unsafe fn ",
                        ]
                        .iter()
                        .any(|p| trimmed.starts_with(p));
                    if is_fn && !code(line).trim_end().ends_with(';') {
                        open = Some((n, indent.to_owned(), trimmed));
                        body = code(line).contains('{');
                    }
                }
                Some((start, at, name)) => {
                    if line.starts_with(at.as_str()) && trimmed.starts_with('}') && indent == at {
                        let len = n - start + 1;
                        if len > MAX_FN_LINES {
                            long.push(format!("{}: `{name}` {len} lines", path.display()));
                        }
                        open = None;
                    }
                }
            }
        }
    }
    assert!(long.is_empty(), "too long: {long:#?}");
}

/// Every Rust file of the workspace: the crates' sources, tests, examples and benches.
fn workspace_files() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for path in entries.map(|e| e.expect("an entry").path()) {
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&path).expect("a source file");
                out.push((path, text));
            }
        }
    }
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace's crates");
    let mut out = Vec::new();
    walk(crates, &mut out);
    out
}

#[test]
fn comments_cite_only_documents_in_the_repository() {
    let mut cited = Vec::new();
    for (path, text) in workspace_files() {
        if path.ends_with("shape.rs") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            if lower.contains("seed 0") || lower.contains("design rule") || line.contains("DESIGN")
            {
                cited.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        cited.is_empty(),
        "citations of documents outside the repository: {cited:#?}"
    );
}

/// Every test `docs/contract.md` names under "Checked by" exists in this suite.
#[test]
fn the_contract_names_tests_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let contract = fs::read_to_string(root.join("../../docs/contract.md")).expect("the contract");
    let suite = root.join("tests/contract");
    let mut missing = Vec::new();
    let mut named = 0;
    for paragraph in contract
        .split("\n\n")
        .filter(|p| p.starts_with("Checked by:"))
    {
        for name in paragraph.split('`').skip(1).step_by(2) {
            let Some((module, test)) = name.rsplit_once("::") else {
                continue;
            };
            let dir = suite.join(module.replace("::", "/"));
            let candidates = [dir.with_extension("rs"), dir.join("mod.rs")];
            let found = candidates.iter().any(|file| {
                fs::read_to_string(file).is_ok_and(|text| text.contains(&format!("fn {test}(")))
            });
            if !found {
                missing.push(name.to_owned());
            }
            named += 1;
        }
    }
    assert!(named > 50, "the contract names its tests ({named} found)");
    assert!(
        missing.is_empty(),
        "named in docs/contract.md but not found: {missing:#?}"
    );
}
