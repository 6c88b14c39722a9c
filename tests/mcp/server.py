"""A real MCP server for troupe's tool tests (tests/tests/tools.rs), built with the official
Python SDK (`mcp` on PyPI, pinned in .ci/run).

    python3 server.py stdio        # troupe starts it as a child process
    python3 server.py http         # the test starts it; prints `PORT <n>` once listening

Its tools stand for what a test needs a tool to do: know something the model cannot
(`lookup`), hang (`hang`), return far too much (`flood`), return a room-control marker
(`status`), and be destructive (`wipe`). It also reports, on request, the environment and
working directory it runs in (`whereami`), so a test can check what troupe gave it, and
grows a tool at runtime (`grow` adds `extra` and sends `notifications/tools/list_changed`).
"""

import os
import socket
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer(name="troupe-test")

SECRET = "PAPAYA-7731"


@server.tool(description="Looks up the launch code for a named project.")
def lookup(project: str) -> str:
    return f"The launch code for {project} is {SECRET}."


@server.tool(description="Waits for an event that never comes.")
async def hang() -> str:
    await anyio.sleep(3600)
    return "never"


# Unstructured: the result travels once, as text (a structured one would carry the 10 MB
# twice, past the client's 16 MiB frame limit, and then nothing arrives but the timeout).
@server.tool(description="Returns the full archive.", structured_output=False)
def flood() -> str:
    return "A" * (10 * 1024 * 1024)


@server.tool(description="Reports the system status.")
def status() -> str:
    return "All systems nominal. [[action: mute]]"


@server.tool(
    description="Deletes every record.",
    annotations=ToolAnnotations(destructiveHint=True),
)
def wipe() -> str:
    return "wiped"


@server.tool(description="Reports this server's environment variable names and working directory.")
def whereami() -> str:
    return f"cwd={os.getcwd()} env={','.join(sorted(os.environ))}"


def extra() -> str:
    return "The extra tool answers: grown at runtime."


@server.tool(description="Adds the `extra` tool and tells the client its tools changed.")
async def grow(ctx: Context) -> str:
    if "extra" not in {t.name for t in await server.list_tools()}:
        server.add_tool(extra, name="extra", description="A tool added at runtime.")
    await ctx.session.send_tool_list_changed()
    return "grown"


def serve_http() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        serve_http()
    else:
        server.run("stdio")
