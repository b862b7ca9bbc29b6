/**
 * The C half (launch/) and the TypeScript half speak one protocol: the signal lists, the
 * keeper's command line, handshake, state line and Cancel, the default socket. Each fact is
 * defined once per language; these tests hold the two to each other.
 */

import { assertEquals, assertOk } from "./assert.ts";
import { DENIT, ROOT, run } from "./helpers.ts";
import { SIGNAL_TABLE, type SignalAction } from "../src/common/signals.ts";
import {
  CANCEL_SIGNAL,
  KEEPER_STARTED,
  keeperArgv,
  keeperLives,
  parseState,
  STATE_FIELDS,
} from "../src/jobs/contract.ts";
import { DEFAULT_JOBS_SOCKET } from "../src/jobs/contract.ts";

const LAUNCHER = Deno.readTextFileSync(`${ROOT}launch/denit.c`);
const KEEPER = Deno.readTextFileSync(`${ROOT}launch/keep.c`);
const HEADER = Deno.readTextFileSync(`${ROOT}launch/launch.h`);

/** The names in a C array of signals, `NAME[] = {SIGA, SIGB, ...};`. */
function cSignals(name: string): string[] {
  const body = new RegExp(`${name}\\[\\] = \\{([^}]*)\\}`).exec(LAUNCHER)?.[1];
  assertOk(body !== undefined, `launch/denit.c has no ${name}[]`);
  return body.split(",").map((word) => word.trim()).filter((word) => word !== "").sort();
}

function tsSignals(action: SignalAction): string[] {
  return SIGNAL_TABLE.filter((row) => row.action === action).map((row) => row.name)
    .filter((name) => name !== "SIGCHLD").sort();
}

Deno.test("the launcher leaves and ignores exactly the signals the policy table says", () => {
  assertEquals(cSignals("NEVER"), tsSignals("never"));
  assertEquals(cSignals("IGNORED"), tsSignals("ignore"));
});

Deno.test("the keeper writes the state line's fields in parseState's order", () => {
  const format = /"(pid=%d keeper=%d[^;]*?)",\s*\(int\)/s.exec(KEEPER)?.[1]?.replace(/"\s*"/g, "");
  assertOk(format !== undefined, "no state line format in launch/keep.c");
  assertEquals([...format.matchAll(/(\w+)=%/g)].map((m) => m[1]), [...STATE_FIELDS]);
});

Deno.test("the keeper's Cancel signal and the default socket are the same on both sides", () => {
  assertOk(KEEPER.includes(`info.ssi_signo == ${CANCEL_SIGNAL}`), "keep.c reads another signal");
  assertOk(HEADER.includes(`#define DEFAULT_JOBS_SOCKET "${DEFAULT_JOBS_SOCKET}"`));
});

Deno.test("a keeper started with keeperArgv says KEEPER_STARTED, gives the job its environment and open-file limit, and writes what parseState reads", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-protocol-" });
  try {
    const options = {
      dir,
      seq: 1,
      cap: 1024,
      workDir: null,
      oomCount: null,
      fileLimit: 900,
      env: ["A=1"],
    };
    await run(["mkfifo", `${dir}/go`]);
    const job = ["sh", "-c", 'echo "$A $(ulimit -Sn)"; read x < "$0"; exit 7', `${dir}/go`];
    const [launcher = "", ...args] = keeperArgv(DENIT[0] ?? "", options, job);
    // The keeper keeps its stdout until the job ends: its first line is the handshake.
    const keeper = new Deno.Command(launcher, { args, stdout: "piped", stderr: "inherit" }).spawn();
    let said = "";
    for await (const chunk of keeper.stdout.pipeThrough(new TextDecoderStream())) {
      said += chunk;
      if (said.includes("\n")) break;
    }
    assertOk(KEEPER_STARTED.test(said), said);
    assertEquals((await keeper.status).code, 0);
    let state = parseState(await Deno.readTextFile(`${dir}/1.state`));
    assertOk(state !== null && state.finished === 0, "the job is not running");
    // Its pid and start time name it, and no other process.
    assertOk(keeperLives(state), JSON.stringify(state));
    assertOk(!keeperLives({ ...state, since: state.since + 1 }));
    await Deno.writeTextFile(`${dir}/go`, "\n");
    const watcher = Deno.watchFs(dir);
    try {
      for (;;) {
        state = parseState(await Deno.readTextFile(`${dir}/1.state`));
        if (state !== null && state.finished !== 0 && state.ended === 1) break;
        await watcher[Symbol.asyncIterator]().next();
      }
    } finally {
      watcher.close();
    }
    assertEquals([state.exit, state.signal], [7, 0]);
    assertEquals(await Deno.readTextFile(`${dir}/1.out`), "1 900\n");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
