/** The form users run: what the launcher keeps from the runtime, and the bundle's halves. */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import { bundleAlone, DENIT, freePort, listeningSocketsOf, run, Running } from "./helpers.ts";

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
    // The launcher kept NODE_OPTIONS from the runtime: nothing was opened, nothing to say.
    const status = await proc.status();
    assertEquals([status.code, status.stderr], [143, ""]);
  } finally {
    await proc.stop();
  }
});

Deno.test({
  name:
    "the bundle's optional half: a plain run needs none of it; without it, what needs it fails in one line",
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-plain-" });
    try {
      const alone = await bundleAlone(dir);
      const plain = await run([...alone, "-s", "--", "sh", "-c", "echo ran"]);
      assertEquals([plain.code, plain.stdout, plain.stderr], [0, "ran\n", ""]);
      const missing = new RegExp(
        `cannot load ${dir}/denit-features\\.js, denit's code for copy mode ` +
          `and the health endpoint \\(.+\\)\\n$`,
      );
      const init = await run([...alone, "init", `${dir}/shared`]);
      assertEquals(init.code, 125, init.stderr);
      assertMatch(init.stderr, new RegExp(`^denit: ${missing.source}`));
      const health = await run([...alone, "-s", "--health-addr", "127.0.0.1:0", "--", "true"]);
      assertEquals(health.code, 125, health.stderr);
      assertMatch(
        health.stderr,
        new RegExp(`Cannot serve health on "127\\.0\\.0\\.1:0": ${missing.source}`),
      );
      assertEquals(health.stderr.split("\n").length, 2, health.stderr);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("in a working directory that was removed, denit exits 125 with one line", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-gone-" });
  // The shell removes the directory it stands in, then becomes denit there.
  const script = `cd "$1" && rmdir "$1" && shift && exec "$@"`;
  const result = await run(["sh", "-c", script, "sh", dir, ...DENIT, "--", "true"]);
  await Deno.remove(dir).catch(() => {}); // removed by the shell unless it failed first
  assertEquals(result.code, 125, result.stderr);
  assertEquals(
    result.stderr,
    "denit: the working directory was removed, and the runtime cannot start in it: start denit " +
      "in one that exists\n",
  );
});

Deno.test("the launcher alone (an engine's one-file init) exits 125 with one line that points the way", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-alone-" });
  try {
    // In a directory whose name holds a line break: the line shows it as \x0a.
    const home = `${dir}/line\nbreak`;
    await Deno.mkdir(home);
    await Deno.copyFile(DENIT[0] ?? "", `${home}/init`);
    await Deno.chmod(`${home}/init`, 0o755);
    const result = await run([`${home}/init`, "--", "true"]);
    assertEquals(result.code, 125);
    assertMatch(
      result.stderr,
      /^denit: cannot start the runtime .*\/line\\x0abreak\/deno: No such file or directory; denit is this launcher with the runtime and bundles beside it: run the image's \/denit or DIR\/denit of `denit init DIR`, not the launcher alone\n$/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
