//! The real MCP server the tool tests run (`tests/mcp/server.py`, built with the official
//! Python SDK, `mcp` on PyPI): where its script is, and the Python that can run it.

use std::path::PathBuf;

/// The Python that has the MCP SDK, as an absolute path (what `TROUPE_MCP_COMMANDS` lists),
/// or `None` (the test is skipped, except under CI, where it fails).
pub fn python() -> Option<String> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import mcp.server.mcpserver, sys; print(sys.executable)",
        ])
        .output()
        .ok()?;
    let found = out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|p| !p.is_empty());
    if found.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !ci,
            "the MCP Python SDK is missing: `python3 -m pip install mcp==2.3.0` (.ci/run does)"
        );
        eprintln!("skipping: the MCP Python SDK (`mcp` on PyPI) is not installed");
    }
    found
}

/// The server's script, by absolute path.
pub fn server_script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("mcp/server.py")
        .display()
        .to_string()
}

/// The command line the operator allows for the stdio server, `python script` (what
/// `TROUPE_MCP_COMMANDS` lists: the arguments are part of what is allowed, issue 43).
pub fn allowed_line(python: &str) -> String {
    format!("{python} {}", server_script())
}

/// Waits until no MCP server of `agent` is `starting` any more (servers connect in the
/// background, issue 43), and returns them as `GET /api/agents/{agent}` lists them
/// (`mcpServers`: `name`, `state`, `tools`). A test that talks to a persona's tools right
/// after the start waits here first.
pub async fn servers_settled(app: &crate::TestApp, agent: &str) -> serde_json::Value {
    let path = format!("/api/agents/{agent}");
    crate::eventually(
        &format!("{agent}'s MCP servers have started"),
        crate::WAIT,
        || async {
            let (_, view) = app.get(&path).await;
            view["mcpServers"]
                .as_array()
                .is_some_and(|s| s.iter().all(|s| s["state"] != "starting"))
        },
    )
    .await;
    app.get(&path).await.1["mcpServers"].clone()
}
