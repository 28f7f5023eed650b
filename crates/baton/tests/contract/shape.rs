//! The crate's shape, checked on its own sources: top-level modules import only modules
//! below them (`docs/architecture.md` lists the layers), no file has more than 400 lines
//! of non-test code, no function more than 100, and no comment cites a document outside
//! the repository. Sizes count lines of code: blank lines, comments and rustdoc are free,
//! so documentation never has to make room for code.

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

const MAX_FILE_LINES: usize = 400;
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

/// Whether `line` counts toward a size limit: it holds code, not only a comment, a doc
/// comment or whitespace.
fn is_code(line: &str) -> bool {
    let trimmed = line.trim();
    !trimmed.is_empty() && !trimmed.starts_with("//")
}

#[test]
fn sizes_count_code_not_docs() {
    for line in ["let x = 1;", "    }", "fn a() {} // note"] {
        assert!(is_code(line), "{line}");
    }
    for line in [
        "",
        "   ",
        "/// An item.",
        "    //! A module.",
        "// a comment",
    ] {
        assert!(!is_code(line), "{line:?}");
    }
}

/// The code of a line, without its comment (doc comments included).
fn code(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

fn top_module(path: &Path) -> String {
    module_path(path)
        .first()
        .cloned()
        .unwrap_or_else(|| "lib".to_owned())
}

/// The module path of a source file: `src/engine/driver/mod.rs` is `[engine, driver]`,
/// `src/lib.rs` is `[]`.
fn module_path(path: &Path) -> Vec<String> {
    let rel = path.strip_prefix(src()).expect("under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// The names the crate root re-exports, each with the top module it comes from
/// (`Pipeline` → `onion`), read from `lib.rs`'s `pub use` items.
fn root_exports() -> BTreeMap<String, String> {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let mut out = BTreeMap::new();
    for item in lib.split("pub use ").skip(1) {
        let item = &item[..item.find(';').unwrap_or(item.len())];
        let module: String = item.chars().take_while(|c| *c != ':').collect();
        for name in leaf_names(item) {
            out.insert(name, module.trim().to_owned());
        }
    }
    out
}

/// The last segments of a use tree: `a::{B, c::D}` gives `B` and `D`.
fn leaf_names(tree: &str) -> Vec<String> {
    tree.split([',', '{', '}'])
        .filter_map(|part| part.rsplit("::").next())
        .map(|name| name.split(" as ").last().unwrap_or(name).trim().to_owned())
        .filter(|name| !name.is_empty() && name != "self")
        .collect()
}

/// The first segments of the paths a use tree names at its top: `{a::X, b, c::{D, e}}`
/// gives `a`, `b`, `c`; `a::X` gives `a`.
fn first_segments(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(inner) = rest.trim_start().strip_prefix('{') else {
        return vec![ident(rest)];
    };
    let (mut depth, mut out, mut item) = (0usize, Vec::new(), String::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(ident(&item));
                item.clear();
                continue;
            }
            _ => {}
        }
        if depth == 0 {
            item.push(c);
        }
    }
    out.push(ident(&item));
    out.retain(|s| !s.is_empty());
    out
}

/// The top modules a file at `module` names in `code`, through `crate::` paths (grouped or
/// not, root re-exports resolved to their module) and `super::` chains that climb to the
/// crate root.
fn named_modules(code: &str, module: &[String], exports: &BTreeMap<String, String>) -> Vec<String> {
    let resolve = |name: String| exports.get(&name).cloned().unwrap_or(name);
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        out.extend(
            first_segments(&code[at + "crate::".len()..])
                .into_iter()
                .map(resolve),
        );
    }
    let mut from = 0;
    while let Some(at) = code[from..].find("super::") {
        let at = from + at;
        let before = code[..at].chars().last();
        let mut rest = &code[at..];
        let mut ups = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            ups += 1;
            rest = r;
        }
        from = code.len() - rest.len();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if ups >= module.len() {
            out.extend(first_segments(rest).into_iter().map(resolve));
        }
    }
    out
}

/// The forms of path the crate's sources use (rustfmt's spelling). Not read: glob imports
/// of the root (`use crate::*`), `super::` nested inside braces or after `self::`.
#[test]
fn the_import_check_reads_the_forms_the_crate_uses() {
    let exports = root_exports();
    assert_eq!(exports.get("Pipeline").map(String::as_str), Some("onion"));
    let engine = vec!["engine".to_owned(), "driver".to_owned()];
    let names = |code: &str| named_modules(code, &engine, &exports);
    assert_eq!(names("use crate::builder::X;"), ["builder"]);
    assert_eq!(
        names("use crate::{builder::X, error::{A, B}, util};"),
        ["builder", "error", "util"]
    );
    assert_eq!(names("use crate::Pipeline;"), ["onion"]);
    assert_eq!(names("use super::super::builder::X;"), ["builder"]);
    assert_eq!(names("use super::node::X;"), Vec::<String>::new());
    assert_eq!(names("let x = my_crate::builder::X;"), Vec::<String>::new());
}

#[test]
fn modules_import_only_the_layers_below_them() {
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let exports = root_exports();
    let mut up = BTreeMap::new();
    for (path, text) in sources() {
        let me = top_module(&path);
        let Some(mine) = rank(&me) else {
            assert_eq!(me, "lib", "{} is in no layer", path.display());
            continue;
        };
        let module = module_path(&path);
        // A `use` may span lines: read each file's code as one text, statement by statement.
        let code: Vec<&str> = without_tests(&text).into_iter().map(code).collect();
        let code = code.join(" ");
        for statement in code.split(';') {
            for name in named_modules(statement, &module, &exports) {
                if rank(&name).is_some_and(|theirs| theirs > mine) {
                    let words: Vec<&str> = statement.split_whitespace().collect();
                    let tail = words[words.len().saturating_sub(12)..].join(" ");
                    up.insert(format!("{} -> {name}", path.display()), tail);
                }
            }
        }
    }
    assert!(up.is_empty(), "imports that point up: {up:#?}");
}

/// Whether `line` (trimmed) opens a function: any visibility, then any of `const`,
/// `async`, `unsafe`, `extern "ABI"`, then `fn `.
fn opens_fn(line: &str) -> bool {
    let mut rest = line;
    if let Some(r) = rest.strip_prefix("pub") {
        rest = r.trim_start();
        if rest.starts_with('(') {
            match rest.find(')') {
                Some(close) => rest = rest[close + 1..].trim_start(),
                None => return false,
            }
        }
    }
    loop {
        if let Some(r) = ["const ", "async ", "unsafe ", "default "]
            .iter()
            .find_map(|q| rest.strip_prefix(q))
        {
            rest = r.trim_start();
        } else if let Some(r) = rest.strip_prefix("extern ") {
            rest = r.trim_start();
            if rest.starts_with('"') {
                match rest[1..].find('"') {
                    Some(close) => rest = rest[close + 2..].trim_start(),
                    None => return false,
                }
            }
        } else {
            break;
        }
    }
    rest.starts_with("fn ")
}

#[test]
fn every_form_of_function_is_measured() {
    for line in [
        "fn a() {",
        "pub(super) const fn a() {",
        "pub(in crate::engine) fn a() {",
        "unsafe fn a() {",
        "async unsafe fn a() {",
        "pub(crate) extern \"C\" fn a() {",
    ] {
        assert!(opens_fn(line), "{line}");
    }
    for line in ["let f = |x| x;", "// fn a() {", "pub struct Fn;"] {
        assert!(!opens_fn(line), "{line}");
    }
}

#[test]
fn no_file_or_function_is_too_long() {
    let mut long = Vec::new();
    for (path, text) in sources() {
        long.extend(too_long(&path, &text));
    }
    assert!(long.is_empty(), "too long: {long:#?}");
}

/// The folders of the other crates whose code the size limits apply to: `baton-redis`, the
/// stand-in fixture, the examples and the bench (all its binaries).
const OTHER_CODE: [&str; 5] = [
    "baton-redis/src",
    "baton-stand-in/src",
    "baton-examples/src",
    "baton-examples/examples",
    "baton-bench/src",
];

#[test]
fn the_other_crates_keep_the_size_limits() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace's crates");
    let mut long = Vec::new();
    let mut read = 0;
    for (path, text) in workspace_files() {
        let rel = path.strip_prefix(crates).unwrap_or(&path);
        let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let is_test = name == "tests.rs" || name.ends_with("_tests.rs");
        if OTHER_CODE.iter().any(|dir| rel.starts_with(dir)) && !is_test {
            read += 1;
            long.extend(too_long(&path, &text));
        }
    }
    assert!(read > 40, "read only {read} files: have the crates moved?");
    assert!(long.is_empty(), "too long: {long:#?}");
}

/// What in `text` (the file at `path`) is over a size limit: the file, if it has more than
/// [`MAX_FILE_LINES`] lines of non-test code, and each function of more than
/// [`MAX_FN_LINES`].
fn too_long(path: &Path, text: &str) -> Vec<String> {
    let mut long = Vec::new();
    let lines = without_tests(text);
    let code_lines = lines.iter().filter(|l| is_code(l)).count();
    if code_lines > MAX_FILE_LINES {
        long.push(format!("{}: {code_lines} lines of code", path.display()));
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
                let is_fn = opens_fn(code(trimmed));
                if is_fn && !code(line).trim_end().ends_with(';') {
                    open = Some((n, indent.to_owned(), trimmed));
                    body = code(line).contains('{');
                }
            }
            Some((start, at, name)) => {
                if line.starts_with(at.as_str()) && trimmed.starts_with('}') && indent == at {
                    let len = lines[*start..=n].iter().filter(|l| is_code(l)).count();
                    if len > MAX_FN_LINES {
                        long.push(format!("{}: `{name}` {len} lines", path.display()));
                    }
                    open = None;
                }
            }
        }
    }
    long
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
