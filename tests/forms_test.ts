/** The two forms of denit (deno run and the compiled binary) behave alike where it matters. */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import { DENIT, freePort, Running } from "./helpers.ts";

const COMPILED = DENIT.length === 1;

/** Inodes of the listening TCP sockets of the network namespace. */
function listeningInodes(): Set<string> {
  const inodes = new Set<string>();
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text = "";
    try {
      text = Deno.readTextFileSync(file);
    } catch {
      continue; // no IPv6: nothing listens there
    }
    for (const line of text.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields[3] === "0A" && fields[9] !== undefined) inodes.add(fields[9]); // TCP_LISTEN
    }
  }
  return inodes;
}

/** Listening sockets held by a process. */
function listeningSocketsOf(pid: number): number {
  const listening = listeningInodes();
  let count = 0;
  for (const entry of Deno.readDirSync(`/proc/${pid}/fd`)) {
    try {
      const link = Deno.readLinkSync(`/proc/${pid}/fd/${entry.name}`);
      const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
      if (inode !== undefined && listening.has(inode)) count++;
    } catch {
      // Closed while we looked: not a socket any more.
    }
  }
  return count;
}

Deno.test("NODE_OPTIONS=--inspect opens no debugger port in denit; the child gets it unchanged", async () => {
  const port = freePort();
  const options = `--inspect=127.0.0.1:${port} --max-old-space-size=64`;
  const child = `printf 'node_options=%s\\n' "$NODE_OPTIONS"; echo ready; exec sleep 30`;
  const proc = new Running([...DENIT, "-s", "--", "sh", "-c", child], {
    env: { NODE_OPTIONS: options },
  });
  try {
    await proc.waitFor(/^ready$/);
    assertEquals(proc.line(0), `node_options=${options}`);
    assertEquals(listeningSocketsOf(proc.child.pid), 0, "denit holds a listening socket");
    const connected = await Deno.connect({ hostname: "127.0.0.1", port }).then(
      (conn) => (conn.close(), true),
      () => false,
    );
    assertOk(!connected, `something listens on ${port}`);
    proc.kill("SIGTERM");
    const status = await proc.status();
    if (!COMPILED) {
      // deno run opened it before denit ran; denit closed it and says so once.
      assertMatch(status.stderr, /warn: closed the V8 inspector that NODE_OPTIONS opened/);
    }
  } finally {
    await proc.stop();
  }
});
