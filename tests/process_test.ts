/** Units over the FFI shim: wait-status decoding, and a real spawn/wait/reap round trip. */

import { assertEquals, assertOk } from "./assert.ts";
import { processState, waitUntil } from "./helpers.ts";
import {
  decodeWaitStatus,
  Errno,
  errnoMessage,
  hasTerminated,
  lastReapedStatus,
  reapNext,
  sendSignal,
  spawn,
} from "../src/sys/process.ts";

Deno.test("wait statuses decode as the sys/wait.h macros do", () => {
  assertEquals(decodeWaitStatus(0), { kind: "exited", code: 0 });
  assertEquals(decodeWaitStatus(42 << 8), { kind: "exited", code: 42 });
  assertEquals(decodeWaitStatus(255 << 8), { kind: "exited", code: 255 });
  assertEquals(decodeWaitStatus(9), { kind: "signaled", signo: 9, coreDumped: false });
  assertEquals(decodeWaitStatus(0x80 | 11), { kind: "signaled", signo: 11, coreDumped: true });
  assertEquals(decodeWaitStatus(64), { kind: "signaled", signo: 64, coreDumped: false });
});

Deno.test("spawn, see the end without reaping, then reap; errno paths", async () => {
  const encoder = new TextEncoder();
  const result = spawn({
    path: encoder.encode("/bin/sh"),
    argv: ["sh", "-c", "exit 9"].map((a) => encoder.encode(a)),
  });
  assertOk(result.kind === "spawned");
  await waitUntil(() => hasTerminated(result.pid), "the child's end", 5000);
  // WNOWAIT: the child is still a zombie, so its pid cannot have been reused.
  assertEquals(processState(result.pid), "Z", "WNOWAIT left no zombie");
  assertEquals(sendSignal(result.pid, 0), { ok: true });
  assertEquals(reapNext(), result.pid);
  assertEquals(lastReapedStatus(), { kind: "exited", code: 9 });
  assertEquals(reapNext(), -Errno.ECHILD);
  assertEquals(hasTerminated(result.pid), false);
  const missing = spawn({ path: encoder.encode("/no/such"), argv: [encoder.encode("x")] });
  if (Deno.env.get("LANE_EMULATED") === undefined) {
    assertEquals(missing, { kind: "failed", errno: Errno.ENOENT, stage: "exec" });
  } else {
    // qemu-user runs posix_spawn's shared-memory child as a fork: the exec's error does not come
    // back, the child ends 127 (tests/arm64_test.ts).
    assertOk(missing.kind === "spawned");
    await waitUntil(() => hasTerminated(missing.pid), "the failed child's end", 5000);
    assertEquals(reapNext(), missing.pid);
    assertEquals(lastReapedStatus(), { kind: "exited", code: 127 });
  }
  assertEquals(errnoMessage(Errno.ENOENT), "No such file or directory");
  assertEquals(sendSignal(result.pid, 0), { ok: false, errno: Errno.ESRCH });
});
