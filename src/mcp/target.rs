//! What a request names: a tool, a prompt or a resource, and its name or URI.

/// What kind of entry: what a list answer lists and a policy rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tool,
    Prompt,
    /// A resource URI (or a resource template's URI template).
    Resource,
}

/// The entry a request names (`tools/call` → its tool, `resources/read` → its URI, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub value: String,
}
