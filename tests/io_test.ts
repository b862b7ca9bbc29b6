/** What the child inherits: stdio, environment, working directory, argv bytes, signal state. */

import { assertEquals, assertOk } from "./assert.ts";
import { DENIT, denitArgv, MODES, program, run } from "./helpers.ts";

Deno.test("10 MB through stdin and stdout arrive unchanged", async () => {
  const input = new Uint8Array(10 * 1024 * 1024);
  for (let i = 0; i < input.length; i += 65536) {
    crypto.getRandomValues(input.subarray(i, Math.min(i + 65536, input.length)));
  }
  const child = new Deno.Command(program(DENIT), {
    args: [...DENIT.slice(1), "-s", "--", "cat"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  const writing = writer.write(input).then(() => writer.close());
  const [out] = await Promise.all([child.output(), writing]);
  assertEquals(out.code, 0);
  assertEquals(out.stdout.length, input.length);
  const digest = async (bytes: Uint8Array<ArrayBuffer>) =>
    new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  assertEquals(await digest(out.stdout), await digest(input));
  assertEquals(out.stderr.length, 0);
});

Deno.test("stderr of the child stays separate from denit's own log lines", async () => {
  const result = await run([...DENIT, "-s", "-v", "--", "sh", "-c", "echo out; echo err >&2"]);
  assertEquals(result.stdout, "out\n");
  assertOk(result.stderr.includes("err\n"));
  for (const line of result.stderr.trimEnd().split("\n")) {
    assertOk(line === "err" || /^denit\[\d+\] (info|debug|warn): /.test(line), line);
  }
});

Deno.test("environment (DENIT_* included) and working directory pass unchanged", async () => {
  const env = {
    PATH: "/usr/bin:/bin",
    SPACED: "a b  c",
    EMPTY: "",
    UNICODE: "grüße ✓",
    DENIT_GROUP: "0",
    MULTI: "line1\nline2",
    // The launcher gives the runtime its own; the child gets the container's.
    GLIBC_TUNABLES: "glibc.malloc.tcache_count=7",
  };
  const dir = await Deno.makeTempDir();
  try {
    const child = new Deno.Command(program(DENIT), {
      args: [
        ...DENIT.slice(1),
        "-s",
        "--",
        "sh",
        "-c",
        "cat /proc/$$/environ; printf 'cwd=%s' \"$(pwd -P)\" >&2",
      ],
      env,
      clearEnv: true,
      cwd: dir,
      stdout: "piped",
      stderr: "piped",
    });
    const out = await child.output();
    const seen = new TextDecoder().decode(out.stdout).split("\0").filter((e) => e !== "").sort();
    const expected = Object.entries(env).map(([k, v]) => `${k}=${v}`).sort();
    assertEquals(seen, expected);
    assertEquals(new TextDecoder().decode(out.stderr), `cwd=${await Deno.realPath(dir)}`);
  } finally {
    await Deno.remove(dir);
  }
});

Deno.test("arguments pass byte-exact: spaces, empty strings, Unicode, globs, dashes", async () => {
  const args = ["a b", "", "  ", "grüße ✓ 𝄞", "$HOME", "*", "-v", "--", "x\ny", "\t"];
  const script = `for a in "$@"; do printf "%s" "$a" | od -An -tx1 | tr -d " \\n"; echo; done`;
  const result = await run([...DENIT, "-s", "--", "sh", "-c", script, "sh", ...args]);
  assertEquals(result.code, 0, result.stderr);
  const hex = (text: string) =>
    [...new TextEncoder().encode(text)].map((b) => b.toString(16).padStart(2, "0")).join("");
  assertEquals(result.stdout.split("\n").slice(0, -1), args.map(hex));
});

for (const mode of MODES) {
  Deno.test(`${mode}: the child starts with no blocked and no ignored signal`, async () => {
    // This test process starts denit with signals 32 and 33 ignored (Deno.Command does); the
    // child must still see none, as under tini. The child reads its own status: no shell in
    // between, whose fork would block every signal for a moment (dash does) and race the read.
    const result = await run(
      denitArgv(mode, ["--", "grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"]),
    );
    assertEquals(result.stdout, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
  });

  Deno.test(`${mode}: a parent's blocked and ignored signals do not reach the child`, async () => {
    // The README's promise (as under dumb-init; tini passes them on): denit started with SIGUSR2
    // blocked and SIGHUP and SIGUSR1 ignored, as `nohup` or such a parent would leave them.
    const parent = [
      "perl",
      "-e",
      'use POSIX; sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGUSR2)); $SIG{HUP} = "IGNORE"; ' +
      '$SIG{USR1} = "IGNORE"; exec @ARGV or die',
    ];
    const child = ["--", "grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"];
    const result = await run([...parent, ...denitArgv(mode, child)]);
    assertEquals(result.stdout, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
  });

  Deno.test(`${mode}: the child leads a new process group`, async () => {
    const result = await run(
      denitArgv(mode, ["--", "sh", "-c", "echo $$ $(cut -d' ' -f5 /proc/$$/stat)"]),
    );
    const [pid, pgid] = result.stdout.trim().split(" ");
    assertEquals(pgid, pid);
  });
}

Deno.test("denit's last line waits for a stderr that drains slowly: it is written, then denit exits", async () => {
  // The child fills denit's stderr pipe (64 KiB) and dies of SIGKILL: denit's warn line about it
  // finds the pipe full. The test starts reading 300 ms later, a reader that is slow, not gone.
  const script = "head -c 65536 /dev/zero >&2; echo filled; kill -KILL $$";
  const proc = new Deno.Command(program(DENIT), {
    args: [...DENIT.slice(1), "-s", "--", "sh", "-c", script],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // Were the pipe full before the child's 64 KiB (a line of denit's first), the child would wait
  // for a reader: bounded, and said.
  let stuck = false;
  const guard = setTimeout(() => {
    stuck = true;
    proc.kill("SIGKILL");
  }, 15_000);
  const stdout = proc.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  while (!seen.includes("filled\n")) {
    const { value, done } = await stdout.read();
    if (done) break;
    seen += value;
  }
  await new Promise((resolve) => setTimeout(resolve, 300));
  const [stderr, status] = await Promise.all([new Response(proc.stderr).text(), proc.status]);
  clearTimeout(guard);
  await stdout.cancel();
  assertOk(!stuck, "the child could not fill the pipe: something was written before it");
  assertEquals(status.code, 137);
  assertOk(/warn: the child was killed by SIGKILL/.test(stderr), stderr.replaceAll("\0", ""));
});
