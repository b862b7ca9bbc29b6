/** Interactive use: on a terminal, the child's group is the foreground group (script(1) PTY). */

import { assertEquals, assertOk } from "./assert.ts";
import { CAN_UNSHARE, DENIT_SHELL, PIDNS } from "./helpers.ts";

const CHILD = `echo pg=$(cut -d' ' -f5 /proc/$$/stat) tpgid=$(cut -d' ' -f8 /proc/$$/stat); \
trap 'echo got-INT; exit 7' INT; echo ready; while :; do sleep 0.05; done`;

function quote(text: string): string {
  return `'${text.replaceAll("'", `'"'"'`)}'`;
}

/** Runs `command` on a new pseudo-terminal (its controlling terminal), presses Ctrl-C. */
async function onTerminal(command: string): Promise<void> {
  const proc = new Deno.Command("script", {
    args: ["-qfec", command, "/dev/null"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => {
    try {
      proc.kill("SIGKILL");
    } catch {
      // Exited just now.
    }
  }, 15_000);
  const decoder = new TextDecoder();
  let seen = "";
  const writer = proc.stdin.getWriter();
  try {
    for await (const chunk of proc.stdout) {
      seen += decoder.decode(chunk, { stream: true });
      if (seen.includes("ready") && !seen.includes("^C")) {
        await writer.write(new Uint8Array([0x03])); // Ctrl-C: SIGINT to the foreground group
        seen += "^C";
      }
    }
    const status = await proc.status;
    assertEquals(status.code, 7, seen);
    const match = /pg=(\d+) tpgid=(\d+)/.exec(seen);
    assertOk(match !== null, seen);
    assertEquals(match[2], match[1], "the child's group is not the terminal's foreground group");
    assertOk(seen.includes("got-INT"), seen);
  } finally {
    clearTimeout(timer);
    await writer.close().catch(() => {/* script already gone: nothing to flush */});
    try {
      proc.kill("SIGKILL");
    } catch {
      // Already exited: the normal case.
    }
  }
}

Deno.test("on a TTY the child is the foreground group and Ctrl-C reaches it", async () => {
  await onTerminal(`${DENIT_SHELL} -s -- sh -c ${quote(CHILD)}`);
});

Deno.test({
  name: "pid1 under a terminal owned outside the namespace: the child still gets the terminal",
  ignore: !CAN_UNSHARE,
  async fn() {
    // Inside the namespace tcgetpgrp() returns 0: the foreground group is outside it.
    await onTerminal(`${PIDNS.join(" ")} ${DENIT_SHELL} -- sh -c ${quote(CHILD)}`);
  },
});
