/** Units: the signal policy table. */

import { assertEquals } from "./assert.ts";
import { SIGNAL_NAMES } from "../src/common/signals.ts";
import { SIGNAL_TABLE } from "../src/supervise/signals.ts";
import { STOP_SIGNALS } from "../src/common/signals.ts";

Deno.test("signal table: one row per signal 1..31 in order, crash signals never forwarded", () => {
  assertEquals(SIGNAL_TABLE.map((row) => row.signo), Array.from({ length: 31 }, (_, i) => i + 1));
  assertEquals(SIGNAL_TABLE.map((row) => row.name), [...SIGNAL_NAMES]);
  const never = [
    "SIGCHLD",
    "SIGSEGV",
    "SIGILL",
    "SIGFPE",
    "SIGBUS",
    "SIGABRT",
    "SIGTRAP",
    "SIGSYS",
  ];
  for (const name of [...never, "SIGKILL", "SIGSTOP"]) {
    assertEquals(SIGNAL_TABLE.find((row) => row.name === name)?.action, "never", name);
  }
  assertEquals([...STOP_SIGNALS].sort(), ["SIGINT", "SIGQUIT", "SIGTERM"]);
});
