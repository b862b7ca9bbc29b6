/** Units: the signal policy table. */

import { assertEquals } from "./assert.ts";
import { SIGNAL_NAMES, SIGNAL_TABLE, STOP_SIGNALS } from "../src/common/signals.ts";

Deno.test("signal table: each row has the number the system gives its name (kill -l)", async () => {
  const out = await new Deno.Command("kill", { args: ["-l"] }).output();
  // procps names 29 POLL, its other name.
  const names = new TextDecoder().decode(out.stdout).trim().split(/\s+/)
    .map((name) => name === "POLL" ? "SIGIO" : `SIG${name}`);
  assertEquals([...SIGNAL_NAMES], names.slice(0, 31));
});

Deno.test("signal table: crash signals never forwarded", () => {
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
