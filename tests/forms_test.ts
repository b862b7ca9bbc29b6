/** The two forms of denit (deno run and the compiled binary) behave alike where it matters. */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import { DENIT, freePort, listeningSocketsOf, Running } from "./helpers.ts";

const COMPILED = DENIT.length === 1;

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
