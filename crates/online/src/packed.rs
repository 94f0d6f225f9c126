//! Commands written straight into one buffer in the server's protocol (RESP), for those whose
//! arguments are many or large: the commit script's (thousands of band keys and the
//! representatives' bodies, kilobytes each) and a batch's view read (thousands of band keys).
//!
//! `redis::ScriptInvocation` keeps each argument in a `Vec` of its own, copies them all into a
//! command when invoked and the command into the bytes it sends: three copies of every body
//! and an allocation per argument, which were a tenth of a producer's time. A [`PackedCall`]
//! writes each argument once, where it is sent from, and a body is written from the words it is
//! made of. The call is `EVALSHA`, loading the script and sending the same bytes again when the
//! server does not have it (as `ScriptInvocation::invoke` does). [`PackedCommands`] is a
//! transaction of commands whose arguments are counted before they are written (a
//! `redis::Pipeline` allocates each argument, and each band key was a `Vec` of its own too).

use redis::{
    Connection, ConnectionLike, ErrorKind, FromRedisValue, Script, ServerErrorKind, Value,
};

/// Bytes kept free at the start of the buffer for the count of arguments, which is known only
/// at the end (`*` and at most 20 digits and `\r\n`).
const HEAD: usize = 24;

/// One call of a script: its keys and arguments, in the protocol's bytes.
pub(crate) struct PackedCall {
    buf: Vec<u8>,
    /// Arguments written so far, `EVALSHA` and its script's hash included.
    count: usize,
}

/// A value written as one argument.
pub(crate) trait PackedArg {
    /// Writes the value as one bulk string (its length, then its bytes).
    fn write(&self, out: &mut Vec<u8>);
}

impl PackedCall {
    /// A call of `script` with `keys`, written into `buf` (emptied first: the buffer of an
    /// earlier call, [`PackedCall::into_buffer`], so that a producer's calls of megabytes do
    /// not each allocate and fault in their pages again); arguments follow with
    /// [`PackedCall::arg`].
    pub(crate) fn new(script: &Script, keys: &[&str], mut buf: Vec<u8>) -> PackedCall {
        buf.clear();
        let mut call = PackedCall { buf, count: 0 };
        call.buf.resize(HEAD, 0);
        call.arg(&b"EVALSHA"[..])
            .arg(script.get_hash())
            .arg(keys.len());
        for key in keys {
            call.arg(*key);
        }
        call
    }

    /// The buffer, for the next call.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// Bytes the buffer holds room for.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Makes room for `bytes` more of arguments.
    pub(crate) fn reserve(&mut self, bytes: usize) -> &mut PackedCall {
        self.buf.reserve(bytes);
        self
    }

    /// Appends an argument.
    pub(crate) fn arg(&mut self, value: impl PackedArg) -> &mut PackedCall {
        value.write(&mut self.buf);
        self.count += 1;
        self
    }

    /// The bytes to send: the count of arguments written into the room kept for it, right
    /// before the first argument.
    fn packed(&mut self) -> &[u8] {
        let (digits, at) = decimal(self.count as u64, false);
        let count = &digits[at..];
        debug_assert!(count.len() + 3 <= HEAD);
        let start = HEAD - count.len() - 3;
        self.buf[start] = b'*';
        self.buf[start + 1..HEAD - 2].copy_from_slice(count);
        self.buf[HEAD - 2..HEAD].copy_from_slice(b"\r\n");
        &self.buf[start..]
    }

    /// Runs the call on `con` (`script` is the one the call was made for: loaded when the
    /// server does not have it, and the call sent again).
    pub(crate) fn invoke<T: FromRedisValue>(
        &mut self,
        script: &Script,
        con: &mut Connection,
    ) -> redis::RedisResult<T> {
        let bytes = self.packed();
        let answer = match con
            .req_packed_command(bytes)
            .and_then(|v| v.extract_error())
        {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.load(con)?;
                con.req_packed_command(bytes)?.extract_error()?
            }
            other => other?,
        };
        Ok(redis::from_redis_value(answer)?)
    }
}

/// Commands run as one transaction (`MULTI`, the commands, `EXEC`) in one round trip, each
/// written with the count of its arguments given first.
pub(crate) struct PackedCommands {
    buf: Vec<u8>,
    commands: usize,
    /// Arguments the command being written still lacks.
    owed: usize,
    /// Whether `EXEC` ends it (it was sent).
    closed: bool,
}

impl PackedCommands {
    /// An empty transaction.
    pub(crate) fn transaction() -> PackedCommands {
        let mut out = PackedCommands {
            buf: Vec::with_capacity(4096),
            commands: 0,
            owed: 0,
            closed: false,
        };
        out.command("MULTI", 0);
        out
    }

    /// Starts the command `name`, which `args` calls of [`PackedCommands::arg`] complete.
    pub(crate) fn command(&mut self, name: &str, args: usize) -> &mut PackedCommands {
        debug_assert_eq!(self.owed, 0, "the command before has all its arguments");
        let (digits, at) = decimal(args as u64 + 1, false);
        self.buf.push(b'*');
        self.buf.extend_from_slice(&digits[at..]);
        self.buf.extend_from_slice(b"\r\n");
        bulk(&mut self.buf, name.as_bytes());
        self.commands += 1;
        self.owed = args;
        self
    }

    /// Appends a script call as the next command.
    pub(crate) fn call(&mut self, call: &mut PackedCall) -> &mut PackedCommands {
        debug_assert_eq!(self.owed, 0, "the command before has all its arguments");
        self.buf.extend_from_slice(call.packed());
        self.commands += 1;
        self
    }

    /// Appends an argument to the command being written.
    pub(crate) fn arg(&mut self, value: impl PackedArg) -> &mut PackedCommands {
        debug_assert!(self.owed > 0, "more arguments than the command was given");
        value.write(&mut self.buf);
        self.owed -= 1;
        self
    }

    /// Runs the transaction: the answer of each command after `MULTI`, in order (a command the
    /// server refused is an error). It may be run again (after loading a script it calls).
    pub(crate) fn query(&mut self, con: &mut Connection) -> redis::RedisResult<Vec<Value>> {
        assert_eq!(self.owed, 0, "the last command has all its arguments");
        if !self.closed {
            self.command("EXEC", 0);
            self.closed = true;
        }
        // The answers of MULTI and of each command queued are skipped; EXEC's holds theirs.
        let skipped = self.commands - 1;
        let mut answers = con.req_packed_commands(&self.buf, skipped, 1)?;
        let exec = answers.pop().ok_or_else(|| {
            redis::RedisError::from((ErrorKind::Client, "no answer to a transaction"))
        })?;
        let Value::Array(items) = exec.extract_error()? else {
            return Err(redis::RedisError::from((
                ErrorKind::Client,
                "a transaction's answer is not a list",
            )));
        };
        items.into_iter().map(Value::extract_error).collect()
    }
}

/// Writes `bytes` as one bulk string.
fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    let (digits, at) = decimal(bytes.len() as u64, false);
    out.reserve(bytes.len() + 26);
    out.push(b'$');
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

impl PackedArg for &[u8] {
    fn write(&self, out: &mut Vec<u8>) {
        bulk(out, self);
    }
}

impl<const N: usize> PackedArg for [u8; N] {
    fn write(&self, out: &mut Vec<u8>) {
        bulk(out, self);
    }
}

impl PackedArg for &Vec<u8> {
    fn write(&self, out: &mut Vec<u8>) {
        bulk(out, self);
    }
}

impl PackedArg for &str {
    fn write(&self, out: &mut Vec<u8>) {
        bulk(out, self.as_bytes());
    }
}

impl PackedArg for &String {
    fn write(&self, out: &mut Vec<u8>) {
        bulk(out, self.as_bytes());
    }
}

/// `n` (negated when `negative`) in decimal: the digits are `out[at..]`.
fn decimal(n: u64, negative: bool) -> ([u8; 21], usize) {
    let mut out = [0u8; 21];
    let mut at = out.len();
    let mut n = n;
    loop {
        at -= 1;
        out[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if negative {
        at -= 1;
        out[at] = b'-';
    }
    (out, at)
}

macro_rules! unsigned_arg {
    ($($t:ty),*) => {$(
        impl PackedArg for $t {
            fn write(&self, out: &mut Vec<u8>) {
                let (digits, at) = decimal(*self as u64, false);
                bulk(out, &digits[at..]);
            }
        }
    )*};
}
unsigned_arg!(usize, u64, u32);

impl PackedArg for i64 {
    fn write(&self, out: &mut Vec<u8>) {
        let (digits, at) = decimal(self.unsigned_abs(), *self < 0);
        bulk(out, &digits[at..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes `redis::ScriptInvocation` sends for the same call.
    fn theirs(script: &Script, keys: &[&str], args: &[Vec<u8>]) -> Vec<u8> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(keys.len());
        for k in keys {
            cmd.arg(*k);
        }
        for a in args {
            cmd.arg(&a[..]);
        }
        cmd.get_packed_command()
    }

    #[test]
    fn a_call_is_packed_as_the_client_packs_it() {
        let script = Script::new("return 1");
        let mut call = PackedCall::new(&script, &["k1", "key two"], b"left over".to_vec());
        call.arg(0usize)
            .arg(1234567890123u64)
            .arg(-42i64)
            .arg(&b""[..])
            .arg("text")
            .arg(7u64.to_le_bytes());
        let args: Vec<Vec<u8>> = vec![
            b"0".to_vec(),
            b"1234567890123".to_vec(),
            b"-42".to_vec(),
            Vec::new(),
            b"text".to_vec(),
            7u64.to_le_bytes().to_vec(),
        ];
        assert_eq!(
            call.packed(),
            &theirs(&script, &["k1", "key two"], &args)[..]
        );
    }

    #[test]
    fn commands_are_packed_as_the_client_packs_them() {
        let mut ours = PackedCommands::transaction();
        ours.command("HMGET", 3)
            .arg("h")
            .arg(1u64.to_le_bytes())
            .arg(&b"x"[..]);
        ours.command("HLEN", 1).arg("h");
        let script = Script::new("return 1");
        let mut call = PackedCall::new(&script, &["k"], Vec::new());
        call.arg(5u64);
        ours.call(&mut call);
        ours.command("EXEC", 0);
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("HMGET")
            .arg("h")
            .arg(&1u64.to_le_bytes()[..])
            .arg("x");
        pipe.cmd("HLEN").arg("h");
        pipe.cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(1)
            .arg("k")
            .arg(5);
        let mut theirs = redis::cmd("MULTI").get_packed_command();
        theirs.extend(pipe.cmd_iter().flat_map(|c| c.get_packed_command()));
        theirs.extend(redis::cmd("EXEC").get_packed_command());
        assert_eq!(ours.buf, theirs);
    }

    #[test]
    fn many_arguments_fit_the_room_for_their_count() {
        let script = Script::new("return 1");
        let mut call = PackedCall::new(&script, &[], Vec::new());
        let mut args = Vec::new();
        for i in 0..100_000u64 {
            call.arg(i);
            args.push(i.to_string().into_bytes());
        }
        assert_eq!(call.packed(), &theirs(&script, &[], &args)[..]);
    }
}
