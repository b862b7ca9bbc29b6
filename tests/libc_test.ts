/** Units over the FFI shim: wait-status decoding, and a real spawn/reap round trip. */

import { assertEquals, assertOk } from "./assert.ts";
import {
  decodeWaitStatus,
  Errno,
  errnoMessage,
  reapOne,
  sendSignal,
  spawn,
  waitForAny,
} from "../src/libc.ts";
import { FORWARDED, SIGNAL_TABLE } from "../src/signals.ts";

Deno.test("wait statuses decode as the sys/wait.h macros do", () => {
  assertEquals(decodeWaitStatus(0), { kind: "exited", code: 0 });
  assertEquals(decodeWaitStatus(42 << 8), { kind: "exited", code: 42 });
  assertEquals(decodeWaitStatus(255 << 8), { kind: "exited", code: 255 });
  assertEquals(decodeWaitStatus(9), { kind: "signaled", signo: 9, coreDumped: false });
  assertEquals(decodeWaitStatus(0x80 | 11), { kind: "signaled", signo: 11, coreDumped: true });
  assertEquals(decodeWaitStatus(64), { kind: "signaled", signo: 64, coreDumped: false });
});

Deno.test("spawn, then reap through the blocking wait; errno paths", async () => {
  const encoder = new TextEncoder();
  const result = spawn({
    path: encoder.encode("/bin/sh"),
    argv: ["sh", "-c", "exit 9"].map((a) => encoder.encode(a)),
  });
  assertOk(result.kind === "spawned");
  const reaped = await waitForAny();
  assertEquals(reaped, { kind: "reaped", pid: result.pid, status: { kind: "exited", code: 9 } });
  assertEquals(reapOne(), { kind: "no-children" });
  const missing = spawn({ path: encoder.encode("/no/such"), argv: [encoder.encode("x")] });
  assertEquals(missing, { kind: "failed", errno: Errno.ENOENT, stage: "exec" });
  assertEquals(errnoMessage(Errno.ENOENT), "No such file or directory");
  assertEquals(sendSignal(result.pid, 0), { ok: false, errno: Errno.ESRCH });
});

Deno.test("signal table: one row per signal 1..31, crash signals never forwarded", () => {
  assertEquals(SIGNAL_TABLE.map((row) => row.signo), Array.from({ length: 31 }, (_, i) => i + 1));
  for (
    const name of [
      "SIGCHLD",
      "SIGSEGV",
      "SIGILL",
      "SIGFPE",
      "SIGBUS",
      "SIGABRT",
      "SIGTRAP",
      "SIGSYS",
      "SIGKILL",
      "SIGSTOP",
    ]
  ) {
    assertEquals(SIGNAL_TABLE.find((row) => row.name === name)?.action, "never", name);
  }
  for (const row of SIGNAL_TABLE) assertOk(row.why.length > 10, row.name);
});

Deno.test("the test children listen for exactly the signals denit forwards", async () => {
  const { FORWARDABLE } = await import("../fixtures/signal_names.ts");
  assertEquals([...FORWARDABLE].sort(), FORWARDED.map((row) => row.name).sort());
});
