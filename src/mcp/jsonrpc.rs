//! JSON-RPC messages the edge writes itself: requests, results and errors, with the keys in
//! the order the MCP SDKs write them (`jsonrpc`, `id`, then `method`, `result` or `error`).
//! Every error body the edge makes comes from [`error`], with a code from [`code`]. This
//! module imports nothing of the edge's: everything else may use it.

use serde_json::Value;

/// JSON-RPC error codes the edge writes (MCP 2026-07-28 numbering).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const SERVER_ERROR: i64 = -32000;
    /// A request the client cancelled (MCP's `RequestCancelled`, as the SDKs answer it).
    pub const REQUEST_CANCELLED: i64 = -32800;
    /// What the Python SDK answers for an unknown prompt (a bare `0`; its servers raise a
    /// plain error there).
    pub const PYTHON_UNKNOWN_PROMPT: i64 = 0;
    /// "Session not found", as the TypeScript SDK answers it.
    pub const SESSION_NOT_FOUND: i64 = -32001;
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const UNSUPPORTED_VERSION: i64 = -32022;
    /// Over a rate limit: the draft SEP's `RateLimited` (SEP-3304, open at 2026-12: HTTP
    /// 429, `data.retryAfterMs`), the next code after the 2026-07-28 revision's -32020 to
    /// -32022. One constant, to follow the SEP if its number changes.
    pub const RATE_LIMITED: i64 = -32023;
}

/// A request's id as JSON text: `null` when there is none to echo.
pub fn id_text(id: Option<&Value>) -> String {
    id.map_or_else(|| "null".to_string(), Value::to_string)
}

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}`; `id` and `result` are JSON text.
pub fn result(id: &str, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

/// `{"jsonrpc":"2.0","id":<id>,"error":{"code":<code>,"message":<message>}}`, with `data`
/// (JSON text) after the message when given; `id` is JSON text (`null` for none).
pub fn error(id: &str, code: i64, message: &str, data: Option<&str>) -> String {
    let message = Value::from(message);
    match data {
        Some(data) => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message},"data":{data}}}}}"#
        ),
        None => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message}}}}}"#
        ),
    }
}

/// A request: `{"jsonrpc":"2.0","id":<id>,"method":<method>,"params":<params>}` (`id` and
/// `params` are JSON text).
pub fn request(id: &str, method: &str, params: &str) -> String {
    let method = Value::from(method);
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method},"params":{params}}}"#)
}

/// A notification: `{"jsonrpc":"2.0","method":<method>,"params":<params>}` (`params` is JSON
/// text).
pub fn notification(method: &str, params: &str) -> String {
    let method = Value::from(method);
    format!(r#"{{"jsonrpc":"2.0","method":{method},"params":{params}}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_are_json_rpc_in_the_sdks_key_order() {
        assert_eq!(
            error("7", -32602, "Tool \"x\" not found", None),
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Tool \"x\" not found"}}"#
        );
        assert_eq!(
            error(&id_text(None), -32022, "v", Some(r#"{"supported":[]}"#)),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32022,"message":"v","data":{"supported":[]}}}"#
        );
        assert_eq!(
            result(&id_text(Some(&json!("a"))), "{}"),
            r#"{"jsonrpc":"2.0","id":"a","result":{}}"#
        );
        let n: Value = serde_json::from_str(&notification(
            "notifications/cancelled",
            r#"{"requestId":3}"#,
        ))
        .unwrap();
        assert_eq!(n["params"]["requestId"], 3);
    }
}
