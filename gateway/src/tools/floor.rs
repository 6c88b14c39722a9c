//! The floor under `TROUPE_MCP_ENV` (issue 43): environment variables a character file may
//! never give an MCP server, even when the operator lists them, because each makes a program
//! run code it names, load code from where it says, install from where it says, or trust or
//! route its traffic as it says. The allow list is the policy (`policy`); this list catches
//! an operator's slip, and names why.
//!
//! Sources: bash(1) and dash(1) (`BASH_ENV`, `ENV`, `SHELLOPTS`, `PS4`, exported functions),
//! ld.so(8) and glibc's list of variables it drops for setuid programs (`unsecvars.h`),
//! python(1) (`PYTHON*`; `PYTHONWARNINGS` imports the module a category names, and
//! `antigravity` then starts `BROWSER`), node(1) (`NODE_OPTIONS=--import=data:…`), perlrun(1),
//! ruby(1), the JVM's `JAVA_TOOL_OPTIONS`, git(1) (`GIT_SSH_COMMAND`, `GIT_CONFIG_*`), the
//! package managers' configuration by environment (npm's `npm_config_*`, pip's `PIP_*`,
//! uv's `UV_*`: a registry to install from is code to run), OpenSSL's `OPENSSL_CONF`
//! (engines are libraries) and the trust stores and proxies clients honour.

/// The variables no character may set, even when `TROUPE_MCP_ENV` lists them: each makes a
/// program run code it names (`BASH_ENV`, `NODE_OPTIONS=--import=…`,
/// `PYTHONWARNINGS`+`BROWSER`), load a library or module from where it says (`LD_PRELOAD`,
/// `PYTHONPATH`, `GCONV_PATH`), install from a registry it names (`NPM_CONFIG_REGISTRY`,
/// `PIP_INDEX_URL`, `UV_INDEX_URL`), or trust or route traffic as it says (`SSL_CERT_FILE`,
/// `HTTPS_PROXY`). Compared without regard to case (`https_proxy` counts). A floor under
/// the allow list, never the policy: a variable is set only when the operator listed it.
pub const ENV_FLOOR: &[&str] = &[
    // shells
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "IFS",
    "CDPATH",
    "GLOBIGNORE",
    "PROMPT_COMMAND",
    "ZDOTDIR",
    "FPATH",
    "SHELL",
    "PATH",
    "HOME",
    "TMPDIR",
    // programs other programs start
    "BROWSER",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "LESSOPEN",
    "LESSCLOSE",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "XDG_CONFIG_HOME",
    "XDG_CONFIG_DIRS",
    "XDG_DATA_HOME",
    "XDG_DATA_DIRS",
    // glibc: the variables it ignores for setuid programs
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TZDIR",
    // interpreters and their package managers
    "NODE_OPTIONS",
    "NODE_PATH",
    "NODE_REPL_EXTERNAL_MODULE",
    "NODE_EXTRA_CA_CERTS",
    "NODE_TLS_REJECT_UNAUTHORIZED",
    "ELECTRON_RUN_AS_NODE",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "GEM_HOME",
    "GEM_PATH",
    "CLASSPATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "LUA_INIT",
    "LUA_PATH",
    "LUA_CPATH",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "TCLLIBPATH",
    "R_PROFILE",
    "R_PROFILE_USER",
    "R_ENVIRON",
    "R_ENVIRON_USER",
    "GOFLAGS",
    "RUSTC_WRAPPER",
    "VIRTUAL_ENV",
    // trust
    "OPENSSL_CONF",
    "OPENSSL_ENGINES",
    "OPENSSL_MODULES",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "KRB5_CONFIG",
];

/// Prefixes of [`ENV_FLOOR`]'s families (every `LD_*`, `PYTHON*`, `GIT_*`…).
pub const ENV_FLOOR_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "PYTHON",
    "PERL5",
    "PERL_",
    "BASH_FUNC_",
    "GIT_",
    "NPM_CONFIG_",
    "YARN_",
    "PNPM_",
    "BUN_",
    "DENO_",
    "COREPACK_",
    "UV_",
    "PIP_",
    "PIPX_",
    "POETRY_",
    "CONDA_",
    "BUNDLE_",
    "DOTNET_",
    "CORECLR_",
    "COMPLUS_",
];

/// Why a character may never set `name` (`None`: it may, when the operator lists it).
pub fn env_floor(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    let well_formed = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !well_formed {
        return Some("is not a variable name (letters, digits and `_`)");
    }
    let floor = ENV_FLOOR.contains(&upper.as_str())
        || ENV_FLOOR_PREFIXES.iter().any(|p| upper.starts_with(p))
        || upper.ends_with("_PROXY");
    floor.then_some(
        "can make the server run code it names, load code from where it says, or trust or \
         route its traffic as it says; a character file may never set it, even when \
         TROUPE_MCP_ENV lists it",
    )
}
