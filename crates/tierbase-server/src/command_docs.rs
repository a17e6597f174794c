//! `COMMAND DOCS`: each served command's summary, group, version and argument schema, in
//! Redis 7's shape, which redis-cli (7.2 and later) builds its typing hints from and client
//! libraries show as help.
//!
//! Owns: the documentation table and its reply. Must not touch: what a command does (that is
//! `command`'s table, which a test keeps in step with this one) or framing (`resp`).
//!
//! The schema describes what tierbase accepts, not all Redis accepts: `SET` lists no expiry
//! options, because tierbase refuses them.

use crate::resp::Reply;

/// What `COMMAND DOCS` says of one command.
pub(crate) struct Doc {
    pub name: &'static str,
    summary: &'static str,
    /// The Redis version that introduced the command, as Redis reports it.
    since: &'static str,
    /// Redis's command group (`string`, `generic`, `connection`, `server`).
    pub group: &'static str,
    complexity: &'static str,
    arguments: &'static [Arg],
}

/// One argument in Redis's command-argument schema.
struct Arg {
    name: &'static str,
    /// `key`, `string`, `integer`, `pattern`, `pure-token`, `oneof` or `block`.
    kind: &'static str,
    token: Option<&'static str>,
    optional: bool,
    multiple: bool,
    /// The alternatives of a `oneof`, the parts of a `block`.
    arguments: &'static [Arg],
}

impl Arg {
    const fn new(name: &'static str, kind: &'static str) -> Arg {
        Arg {
            name,
            kind,
            token: None,
            optional: false,
            multiple: false,
            arguments: &[],
        }
    }

    const fn optional(self) -> Arg {
        Arg {
            optional: true,
            ..self
        }
    }

    const fn multiple(self) -> Arg {
        Arg {
            multiple: true,
            ..self
        }
    }

    const fn token(self, token: &'static str) -> Arg {
        Arg {
            token: Some(token),
            ..self
        }
    }

    /// Whether Redis shows the argument with a display text: all but groups.
    fn has_display_text(&self) -> bool {
        !matches!(self.kind, "oneof" | "block")
    }

    fn reply(&self) -> Reply {
        let mut fields = vec![
            (Reply::bulk("name"), Reply::bulk(self.name)),
            (Reply::bulk("type"), Reply::bulk(self.kind)),
        ];
        if self.has_display_text() {
            fields.push((Reply::bulk("display_text"), Reply::bulk(self.name)));
        }
        // No `key_spec_index`: COMMAND INFO gives Redis 6's six fields, no key-spec table for
        // it to point into.
        if let Some(token) = self.token {
            fields.push((Reply::bulk("token"), Reply::bulk(token)));
        }
        let flags: Vec<Reply> = [("optional", self.optional), ("multiple", self.multiple)]
            .into_iter()
            .filter(|(_, on)| *on)
            .map(|(flag, _)| Reply::Simple(flag.into()))
            .collect();
        if !flags.is_empty() {
            fields.push((Reply::bulk("flags"), Reply::Set(flags)));
        }
        if !self.arguments.is_empty() {
            fields.push((
                Reply::bulk("arguments"),
                Reply::Array(self.arguments.iter().map(Arg::reply).collect()),
            ));
        }
        Reply::Map(fields)
    }
}

const fn key(name: &'static str) -> Arg {
    Arg::new(name, "key")
}

const fn string(name: &'static str) -> Arg {
    Arg::new(name, "string")
}

const fn integer(name: &'static str) -> Arg {
    Arg::new(name, "integer")
}

/// A keyword on its own (`NX`); its name is the keyword in lower case.
const fn pure_token(token: &'static str, name: &'static str) -> Arg {
    Arg::new(name, "pure-token").token(token)
}

const fn one_of(name: &'static str, alternatives: &'static [Arg]) -> Arg {
    Arg {
        arguments: alternatives,
        ..Arg::new(name, "oneof")
    }
}

const fn block(name: &'static str, parts: &'static [Arg]) -> Arg {
    Arg {
        arguments: parts,
        ..Arg::new(name, "block")
    }
}

const fn doc(
    name: &'static str,
    group: &'static str,
    since: &'static str,
    complexity: &'static str,
    summary: &'static str,
    arguments: &'static [Arg],
) -> Doc {
    Doc {
        name,
        summary,
        since,
        group,
        complexity,
        arguments,
    }
}

const O1: &str = "O(1)";
const ON_KEYS: &str = "O(N) where N is the number of keys";
const ONE_KEY: &[Arg] = &[key("key")];
const KEY_VALUE: &[Arg] = &[key("key"), string("value")];
const KEYS: &[Arg] = &[key("key").multiple()];

/// In the order of `command`'s table (a test checks).
pub(crate) static DOCS: &[Doc] = &[
    doc(
        "ping",
        "connection",
        "1.0.0",
        O1,
        "Returns the server's liveliness response.",
        &[string("message").optional()],
    ),
    doc(
        "echo",
        "connection",
        "1.0.0",
        O1,
        "Returns the given string.",
        &[string("message")],
    ),
    doc(
        "quit",
        "connection",
        "1.0.0",
        O1,
        "Closes the connection.",
        &[],
    ),
    doc(
        "hello",
        "connection",
        "6.0.0",
        O1,
        "Handshakes with the server.",
        &[block(
            "arguments",
            &[
                integer("protover"),
                block(
                    "username-password",
                    &[string("username"), string("password")],
                )
                .token("AUTH")
                .optional(),
                string("clientname").token("SETNAME").optional(),
            ],
        )
        .optional()],
    ),
    doc(
        "auth",
        "connection",
        "1.0.0",
        "O(N) where N is the number of passwords defined for the user",
        "Authenticates the connection (only the user `default`).",
        &[string("username").optional(), string("password")],
    ),
    doc(
        "select",
        "connection",
        "1.0.0",
        O1,
        "Changes the selected database (only 0 exists).",
        &[integer("index")],
    ),
    doc(
        "client",
        "connection",
        "2.4.0",
        "Depends on subcommand.",
        "A container for client connection commands: SETNAME, GETNAME, ID, INFO, SETINFO.",
        &[],
    ),
    doc(
        "command",
        "server",
        "2.8.13",
        "O(N) where N is the total number of commands",
        "Returns detailed information about all commands: COUNT, INFO, DOCS.",
        &[],
    ),
    doc(
        "config",
        "server",
        "2.0.0",
        "Depends on subcommand.",
        "A container for server configuration commands: only GET.",
        &[],
    ),
    doc(
        "info",
        "server",
        "1.0.0",
        O1,
        "Returns information and statistics about the server.",
        &[string("section").optional().multiple()],
    ),
    doc(
        "dbsize",
        "server",
        "1.0.0",
        O1,
        "Returns the number of keys in the database.",
        &[],
    ),
    doc(
        "get",
        "string",
        "1.0.0",
        O1,
        "Returns the string value of a key.",
        ONE_KEY,
    ),
    doc(
        "set",
        "string",
        "1.0.0",
        O1,
        "Sets the string value of a key. The key is created if it doesn't exist.",
        &[
            key("key"),
            string("value"),
            one_of(
                "condition",
                &[pure_token("NX", "nx"), pure_token("XX", "xx")],
            )
            .optional(),
            pure_token("GET", "get").optional(),
        ],
    ),
    doc(
        "setnx",
        "string",
        "1.0.0",
        O1,
        "Sets the string value of a key only when the key doesn't exist.",
        KEY_VALUE,
    ),
    doc(
        "getset",
        "string",
        "1.0.0",
        O1,
        "Returns the previous string value of a key after setting it to a new value.",
        KEY_VALUE,
    ),
    doc(
        "getdel",
        "string",
        "6.2.0",
        O1,
        "Returns the string value of a key after deleting the key.",
        ONE_KEY,
    ),
    doc(
        "mget",
        "string",
        "1.0.0",
        ON_KEYS,
        "Returns the string values of one or more keys (each read on its own).",
        KEYS,
    ),
    doc(
        "mset",
        "string",
        "1.0.1",
        ON_KEYS,
        "Creates or modifies the string values of one or more keys (with btree all or none after a crash; other clients may see it partly applied).",
        &[block("data", &[key("key"), string("value")]).multiple()],
    ),
    doc(
        "del",
        "generic",
        "1.0.0",
        ON_KEYS,
        "Deletes one or more keys.",
        KEYS,
    ),
    doc(
        "unlink",
        "generic",
        "4.0.0",
        ON_KEYS,
        "Deletes one or more keys, as DEL does.",
        KEYS,
    ),
    doc(
        "exists",
        "generic",
        "1.0.0",
        ON_KEYS,
        "Determines whether one or more keys exist.",
        KEYS,
    ),
    doc(
        "incr",
        "string",
        "1.0.0",
        O1,
        "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.",
        ONE_KEY,
    ),
    doc(
        "decr",
        "string",
        "1.0.0",
        O1,
        "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.",
        ONE_KEY,
    ),
    doc(
        "incrby",
        "string",
        "1.0.0",
        O1,
        "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.",
        &[key("key"), integer("increment")],
    ),
    doc(
        "decrby",
        "string",
        "1.0.0",
        O1,
        "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.",
        &[key("key"), integer("decrement")],
    ),
    doc(
        "append",
        "string",
        "2.0.0",
        O1,
        "Appends a string to the value of a key. Creates the key if it doesn't exist.",
        KEY_VALUE,
    ),
    doc(
        "strlen",
        "string",
        "2.2.0",
        O1,
        "Returns the length of a string value.",
        ONE_KEY,
    ),
    doc(
        "type",
        "generic",
        "1.0.0",
        O1,
        "Determines the type of value stored at a key (always string).",
        ONE_KEY,
    ),
    doc(
        "ttl",
        "generic",
        "1.0.0",
        O1,
        "Returns the expiration time in seconds of a key (keys do not expire).",
        ONE_KEY,
    ),
    doc(
        "pttl",
        "generic",
        "2.6.0",
        O1,
        "Returns the expiration time in milliseconds of a key (keys do not expire).",
        ONE_KEY,
    ),
    doc(
        "scan",
        "generic",
        "2.8.0",
        "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection.",
        "Iterates over the key names in the database.",
        &[
            integer("cursor"),
            Arg::new("pattern", "pattern").token("MATCH").optional(),
            integer("count").token("COUNT").optional(),
            string("type").token("TYPE").optional(),
        ],
    ),
    doc(
        "flushdb",
        "server",
        "1.0.0",
        "O(N) where N is the number of keys in the selected database",
        "Removes all keys from the database, key by key.",
        &[one_of(
            "flush-type",
            &[pure_token("ASYNC", "async"), pure_token("SYNC", "sync")],
        )
        .optional()],
    ),
    doc(
        "shutdown",
        "server",
        "1.0.0",
        "O(N) when saving, where N is the total number of keys in all databases when saving data, otherwise O(1)",
        "Finishes in-flight commands, closes the store cleanly and shuts the server down (NOSAVE, SAVE, NOW and FORCE change nothing; ABORT is refused: no shutdown waits to be cancelled).",
        &[
            one_of(
                "save-selector",
                &[pure_token("NOSAVE", "nosave"), pure_token("SAVE", "save")],
            )
            .optional(),
            pure_token("NOW", "now").optional(),
            pure_token("FORCE", "force").optional(),
            pure_token("ABORT", "abort").optional(),
        ],
    ),
];

/// The documentation of the command named `name` (lower case), if it is served.
pub(crate) fn find_doc(name: &str) -> Option<&'static Doc> {
    DOCS.iter().find(|d| d.name == name)
}

impl Doc {
    /// The command's entry in a `COMMAND DOCS` reply: its name, and a map of its fields.
    pub(crate) fn entry(&self) -> (Reply, Reply) {
        let mut fields = vec![
            (Reply::bulk("summary"), Reply::bulk(self.summary)),
            (Reply::bulk("since"), Reply::bulk(self.since)),
            (Reply::bulk("group"), Reply::bulk(self.group)),
            (Reply::bulk("complexity"), Reply::bulk(self.complexity)),
        ];
        // As Redis: a command without arguments has no `arguments` field.
        if !self.arguments.is_empty() {
            fields.push((
                Reply::bulk("arguments"),
                Reply::Array(self.arguments.iter().map(Arg::reply).collect()),
            ));
        }
        (Reply::bulk(self.name), Reply::Map(fields))
    }
}
