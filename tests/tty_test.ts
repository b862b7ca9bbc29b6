/** Interactive use: on a terminal, the child's group is the foreground group (script(1) PTY). */

import { assertEquals, assertOk } from "./assert.ts";
import { CAN_UNSHARE, DENIT_SHELL, layOut, PIDNS, run } from "./helpers.ts";

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

Deno.test("on a TTY: what the runtime says before denit runs shows, its cache notes do not", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const denit = quote((await layOut(dir, ["denit.js", "denit-features.js"]))[0] ?? "");
    // A copy on a terminal: only its own line (the runtime cannot open a cache there and
    // would say so, three lines, on a terminal).
    const copied = await run([
      "script",
      "-qec",
      `${denit} copy /etc/hostname ${quote(`${dir}/out`)}`,
      "/dev/null",
    ]);
    assertEquals(copied.code, 0, copied.stdout);
    assertEquals(copied.stdout.replaceAll("\r", "").split("\n").filter((l) => l !== "").length, 1);
    assertOk(/^denit copy: 1 file/.test(copied.stdout), copied.stdout);
    // A bundle the runtime cannot even parse: its error reaches the terminal.
    await Deno.writeTextFile(`${dir}/denit.js`, "not javascript (\n");
    const broken = await run(["script", "-qec", `${denit} -- true`, "/dev/null"]);
    assertOk(broken.code !== 0, broken.stdout);
    assertOk(broken.stdout.includes("SyntaxError"), broken.stdout);
    assertOk(broken.stdout.includes("denit: the runtime ended before denit ran"), broken.stdout);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
