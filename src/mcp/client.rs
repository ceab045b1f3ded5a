//! The requests the edge sends as an MCP client (health checks, absent-answer learning, the
//! doctor, stdio handshakes), written here once: `initialize` and its params, `server/discover`,
//! the 2026-07-28 `_meta` envelope, the `initialized` notification, the revision a session was
//! opened at, and the headers of the DELETE that ends it. Text in, text out: the HTTP exchange
//! belongs to the caller's layer.

use serde_json::Value;

use super::{jsonrpc, LATEST_LEGACY, MODERN_VERSION};

/// Who the edge says it is (`clientInfo`).
#[derive(Debug, Clone, Copy)]
pub struct ClientInfo {
    pub name: &'static str,
    pub version: &'static str,
}

/// Health checks and absent-answer learning.
pub const HEALTH: ClientInfo = ClientInfo {
    name: "mcp-edge-health",
    version: "1",
};

/// `mcp-edge doctor`.
pub const DOCTOR: ClientInfo = ClientInfo {
    name: "mcp-edge-doctor",
    version: env!("CARGO_PKG_VERSION"),
};

/// The edge initialising a stdio process itself.
pub const EDGE: ClientInfo = ClientInfo {
    name: "mcp-edge",
    version: env!("CARGO_PKG_VERSION"),
};

impl ClientInfo {
    /// `{"name":…,"version":…}`.
    pub fn json(&self) -> String {
        format!(
            r#"{{"name":{},"version":{}}}"#,
            Value::from(self.name),
            Value::from(self.version)
        )
    }
}

/// `initialize`'s params: the revision asked for, no client capabilities, `clientInfo`.
pub fn initialize_params(revision: &str, client: ClientInfo) -> String {
    format!(
        r#"{{"protocolVersion":{},"capabilities":{{}},"clientInfo":{}}}"#,
        Value::from(revision),
        client.json()
    )
}

/// An `initialize` request; `id` is JSON text.
pub fn initialize(id: &str, revision: &str, client: ClientInfo) -> String {
    initialize_with(id, &initialize_params(revision, client))
}

/// An `initialize` request with its params already written (JSON text; a stdio process is
/// initialised with the edge's or with a client's own).
pub fn initialize_with(id: &str, params: &str) -> String {
    jsonrpc::request(id, "initialize", params)
}

/// The `notifications/initialized` that follows an answered `initialize`.
pub fn initialized() -> &'static str {
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
}

/// The 2026-07-28 envelope (the value of `params._meta`): revision, no client capabilities,
/// `clientInfo`.
pub fn meta(client: ClientInfo) -> String {
    format!(
        r#"{{"io.modelcontextprotocol/protocolVersion":{},"io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/clientInfo":{}}}"#,
        Value::from(MODERN_VERSION),
        client.json()
    )
}

/// A 2026-07-28 request without params of its own: `params` is the envelope alone (`id` is
/// JSON text).
pub fn enveloped(id: &str, method: &str, client: ClientInfo) -> String {
    jsonrpc::request(id, method, &format!(r#"{{"_meta":{}}}"#, meta(client)))
}

/// A `server/discover` request (`id` is JSON text).
pub fn discover(id: &str, client: ClientInfo) -> String {
    enveloped(id, "server/discover", client)
}

/// The headers a 2026-07-28 request mirrors: its revision and method.
pub fn modern_headers(method: &str) -> [(&'static str, &str); 2] {
    [
        ("mcp-protocol-version", MODERN_VERSION),
        ("mcp-method", method),
    ]
}

/// The revision an `initialize` answer negotiated (`result.protocolVersion`), or the one the
/// edge asked for when it names none.
pub fn negotiated(reply: Option<&Value>) -> &str {
    reply
        .and_then(|r| r.pointer("/result/protocolVersion"))
        .and_then(Value::as_str)
        .unwrap_or(LATEST_LEGACY)
}

/// The headers of a request in a legacy session (the DELETE that ends it among them): the
/// session and the revision it was opened at.
pub fn session_headers<'a>(session: &'a str, revision: &'a str) -> [(&'static str, &'a str); 2] {
    [
        ("mcp-session-id", session),
        ("mcp-protocol-version", revision),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_are_as_the_edge_always_wrote_them() {
        assert_eq!(
            discover(r#""mcp-edge-health""#, HEALTH),
            r#"{"jsonrpc":"2.0","id":"mcp-edge-health","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcp-edge-health","version":"1"}}}}"#
        );
        assert_eq!(
            initialize(r#""mcp-edge-legacy-probe""#, LATEST_LEGACY, HEALTH),
            r#"{"jsonrpc":"2.0","id":"mcp-edge-legacy-probe","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcp-edge-health","version":"1"}}}"#
        );
        let edge: Value = serde_json::from_str(&initialize_params(LATEST_LEGACY, EDGE)).unwrap();
        assert_eq!(edge["clientInfo"]["name"], "mcp-edge");
    }

    #[test]
    fn the_negotiated_revision_defaults_to_the_one_asked() {
        let r = json!({"result": {"protocolVersion": "2025-06-18"}});
        assert_eq!(negotiated(Some(&r)), "2025-06-18");
        assert_eq!(negotiated(Some(&json!({"result": {}}))), LATEST_LEGACY);
        assert_eq!(negotiated(None), LATEST_LEGACY);
        assert_eq!(session_headers("s", "v")[0], ("mcp-session-id", "s"));
    }
}
