/** `denit copy` on real files in temporary directories. */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import {
  CAN_UNSHARE,
  DENIT,
  DENIT_SHELL,
  denitForAnyUser,
  names,
  run,
  Running,
  waitUntil,
  writeFixture,
} from "./helpers.ts";

async function tree(root: string): Promise<Map<string, string>> {
  // path → "kind mode size mtime-ns target" for every entry below root.
  const out = new Map<string, string>();
  const walk = async (dir: string, rel: string) => {
    for await (const entry of Deno.readDir(dir)) {
      const path = `${dir}/${entry.name}`;
      const info = await Deno.lstat(path);
      const kind = info.isSymlink ? "link" : info.isDirectory ? "dir" : "file";
      const target = info.isSymlink ? await Deno.readLink(path) : "";
      const size = info.isFile ? info.size : 0;
      const mtime = info.isSymlink ? "" : String(info.mtime?.getTime());
      out.set(
        `${rel}${entry.name}`,
        `${kind} ${(info.mode ?? 0) & 0o7777} ${size} ${mtime} ${target}`,
      );
      if (info.isDirectory) await walk(path, `${rel}${entry.name}/`);
    }
  };
  await walk(root, "");
  return out;
}

async function withDirs(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "denit-copy-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function makeSource(src: string): Promise<void> {
  await Deno.mkdir(`${src}/bin`, { recursive: true });
  await Deno.mkdir(`${src}/.config/deep/er`, { recursive: true });
  await Deno.writeTextFile(`${src}/bin/tool`, "#!/bin/sh\necho tool\n");
  await Deno.chmod(`${src}/bin/tool`, 0o751);
  await Deno.writeTextFile(`${src}/.config/deep/er/settings`, "x=1\n");
  await Deno.chmod(`${src}/.config/deep/er/settings`, 0o600);
  await Deno.writeFile(`${src}/blob`, crypto.getRandomValues(new Uint8Array(65536)));
  await Deno.writeTextFile(`${src}/empty`, "");
  await Deno.symlink("bin/tool", `${src}/relative-link`);
  await Deno.symlink("/etc/passwd", `${src}/outside-link`);
  await Deno.utime(`${src}/bin/tool`, new Date(1_600_000_000_123), new Date(1_500_000_000_456));
  await Deno.chmod(`${src}/.config`, 0o700);
}

Deno.test("SRC/. copies contents (hidden files too) with modes, times and links", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    const result = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/a/b/dest`]);
    assertEquals(result.code, 0, result.stderr);
    assertMatch(
      result.stderr,
      /^denit copy: 4 files, 5 directories, 2 links, .* MiB in .* s \(.* MiB\/s\); 0 unchanged, 0 skipped\n$/,
    );
    assertEquals(await tree(`${dir}/a/b/dest`), await tree(`${dir}/src`));
    assertEquals(await Deno.readLink(`${dir}/a/b/dest/outside-link`), "/etc/passwd");
    const tool = await Deno.stat(`${dir}/a/b/dest/bin/tool`);
    assertEquals(tool.mtime?.getTime(), 1_500_000_000_456);
    assertEquals((tool.mode ?? 0) & 0o777, 0o751);
  });
});

Deno.test("SRC without /. lands as DEST/basename; several SRCs; a file SRC", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    await Deno.writeTextFile(`${dir}/single`, "one\n");
    const result = await run([...DENIT, "copy", `${dir}/src`, `${dir}/single`, `${dir}/dest`]);
    assertEquals(result.code, 0, result.stderr);
    assertEquals(await tree(`${dir}/dest/src`), await tree(`${dir}/src`));
    assertEquals(await Deno.readTextFile(`${dir}/dest/single`), "one\n");
  });
});

Deno.test("a second run rewrites nothing; a changed file alone is replaced", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    assertEquals((await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`])).code, 0);
    const inodes = async () =>
      new Map(
        [...(await tree(`${dir}/dest`)).keys()].map((
          p,
        ) => [p, Deno.lstatSync(`${dir}/dest/${p}`).ino]),
      );
    const before = await inodes();
    const again = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
    assertEquals(again.code, 0);
    assertMatch(again.stderr, /0 files, 0 directories, 0 links, .*; 6 unchanged, 0 skipped/);
    assertEquals(await inodes(), before);
    await Deno.writeTextFile(`${dir}/src/empty`, "now with content\n");
    const third = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
    assertMatch(third.stderr, /1 file, .*; 5 unchanged/);
    const after = await inodes();
    for (const [path, ino] of before) {
      if (path !== "empty") assertEquals(after.get(path), ino, path);
    }
    assertOk(after.get("empty") !== before.get("empty"));
    assertEquals(await Deno.readTextFile(`${dir}/dest/empty`), "now with content\n");
    assertEquals(await tree(`${dir}/dest`), await tree(`${dir}/src`));
  });
});

Deno.test("--chown by number and by name, --chmod for files only", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    const result = await run([
      ...DENIT,
      "copy",
      "--chown",
      "1001:123",
      "--chmod",
      "0755",
      `${dir}/src`,
      `${dir}/dest`,
    ]);
    assertEquals(result.code, 0, result.stderr);
    for (
      const path of [
        "src",
        "src/bin",
        "src/bin/tool",
        "src/.config/deep/er/settings",
        "src/outside-link",
      ]
    ) {
      const info = await Deno.lstat(`${dir}/dest/${path}`);
      assertEquals([info.uid, info.gid], [1001, 123], path);
    }
    assertEquals(
      (await Deno.stat(`${dir}/dest/src/.config/deep/er/settings`)).mode! & 0o777,
      0o755,
    );
    assertEquals((await Deno.stat(`${dir}/dest/src/.config`)).mode! & 0o777, 0o700);
    const named = await run([
      ...DENIT,
      "copy",
      "--chown",
      "root:root",
      `${dir}/src`,
      `${dir}/named`,
    ]);
    assertEquals(named.code, 0, named.stderr);
    assertEquals((await Deno.lstat(`${dir}/named/src/blob`)).uid, 0);
  });
});

Deno.test("never writes through a symlink in DEST; never follows one out of SRC", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    await Deno.mkdir(`${dir}/outside`);
    await Deno.writeTextFile(`${dir}/outside/victim`, "keep\n");
    await Deno.mkdir(`${dir}/dest`);
    // A directory in SRC meets a symlink to elsewhere in DEST: refused, nothing written.
    await Deno.symlink(`${dir}/outside`, `${dir}/dest/bin`);
    const refused = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
    assertEquals(refused.code, 1);
    assertEquals(
      refused.stderr,
      `denit copy: Refusing to write through the symlink "${dir}/dest/bin"\n`,
    );
    assertEquals(names(`${dir}/outside`), ["victim"]);
    assertEquals(names(`${dir}/dest`), ["bin"]);
    // A file in SRC meets a symlink in DEST: the link itself is replaced, its target untouched.
    await Deno.remove(`${dir}/dest/bin`);
    await Deno.symlink(`${dir}/outside/victim`, `${dir}/dest/blob`);
    const replaced = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
    assertEquals(replaced.code, 0, replaced.stderr);
    assertEquals(await Deno.readTextFile(`${dir}/outside/victim`), "keep\n");
    assertOk((await Deno.lstat(`${dir}/dest/blob`)).isFile);
  });
});

Deno.test("refuses DEST inside SRC and SRC equal to DEST; missing SRC; DEST not creatable", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    const inside = await run([...DENIT, "copy", `${dir}/src`, `${dir}/src/bin/x`]);
    assertEquals(inside.code, 1);
    assertMatch(
      inside.stderr,
      /^denit copy: Cannot copy ".*\/src" into ".*\/src\/bin\/x\/src": DEST is inside SRC\n$/,
    );
    const same = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/src`]);
    assertEquals(same.code, 1);
    assertMatch(same.stderr, /SRC and DEST are the same directory\n$/);
    const missing = await run([...DENIT, "copy", `${dir}/nope`, `${dir}/d`]);
    assertEquals(missing.code, 1);
    assertEquals(
      missing.stderr,
      `denit copy: Cannot copy "${dir}/nope": no such file or directory\n`,
    );
    const notDir = await run([...DENIT, "copy", `${dir}/src/blob`, `${dir}/src/empty/sub`]);
    assertEquals(notDir.code, 1);
    assertMatch(
      notDir.stderr,
      /^denit copy: Cannot [a-z ]+ ".*\/empty\/sub.*": Not a directory\n$/,
    );
    assertEquals((await tree(`${dir}/src`)).size, 10);
  });
});

Deno.test("FIFOs and sockets are reported and skipped; --strict refuses before writing", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    await run(["mkfifo", `${dir}/src/fifo`]);
    const socket = Deno.listen({ transport: "unix", path: `${dir}/src/sock` });
    try {
      const result = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
      assertEquals(result.code, 0, result.stderr);
      assertMatch(result.stderr, /skipping ".*\/fifo": it is a fifo\n/);
      assertMatch(result.stderr, /skipping ".*\/sock": it is a socket\n/);
      assertMatch(result.stderr, /2 skipped\n$/);
      assertOk(!(await Deno.lstat(`${dir}/dest/fifo`).then(() => true, () => false)));
      const strict = await run([...DENIT, "copy", "--strict", `${dir}/src/.`, `${dir}/strict`]);
      assertEquals(strict.code, 1);
      assertMatch(
        strict.stderr,
        /^denit copy: Refusing to copy ".*\/fifo": it is a fifo \(--strict\)\n$/,
      );
      assertOk(!(await Deno.lstat(`${dir}/strict`).then(() => true, () => false)));
    } finally {
      socket.close();
    }
  });
});

/** The system calls a run made, counted by name (strace -f, every thread). */
async function syscalls(argv: string[], names: string[]): Promise<Map<string, number>> {
  const log = await Deno.makeTempFile();
  try {
    const result = await run([
      "strace",
      "-f",
      "-qq",
      "-e",
      `trace=${names.join(",")}`,
      "-o",
      log,
      ...argv,
    ]);
    assertEquals(result.code, 0, result.stderr);
    const counts = new Map<string, number>();
    for (const line of (await Deno.readTextFile(log)).split("\n")) {
      const name = /^\d+\s+([a-z0-9_]+)\(/.exec(line)?.[1];
      if (name !== undefined) counts.set(name, (counts.get(name) ?? 0) + 1);
    }
    return counts;
  } finally {
    await Deno.remove(log);
  }
}

Deno.test("--verify reads every file back, --sync flushes files and directories", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    const names = ["pread64", "fsync"];
    // The runtime itself reads with pread64 (its code, its data): the baseline is a plain copy.
    const plain = await syscalls([...DENIT, "copy", `${dir}/src/.`, `${dir}/plain`], names);
    assertEquals(plain.get("fsync") ?? 0, 0);
    const both = await syscalls(
      [...DENIT, "copy", "--verify", "--sync", `${dir}/src/.`, `${dir}/dest`],
      names,
    );
    // Three files with contents, each read back on both sides; four files and five
    // directories flushed.
    const readBack = (both.get("pread64") ?? 0) - (plain.get("pread64") ?? 0);
    assertOk(readBack >= 6, `${readBack} more pread64 calls with --verify`);
    assertOk((both.get("fsync") ?? 0) >= 9, `fsync: ${both.get("fsync")}`);
    assertEquals(await tree(`${dir}/dest`), await tree(`${dir}/src`));
  });
});

Deno.test("--verify refuses a copy whose source changed under it; without it the copy is kept", async () => {
  await withDirs(async (dir) => {
    await Deno.mkdir(`${dir}/src`);
    const size = 16 << 20;
    await Deno.writeFile(`${dir}/src/big`, new Uint8Array(size));
    // A writer rewrites the source all the time: what verification reads back cannot match
    // what was copied a moment before.
    const writer = new Deno.Command("python3", {
      args: [
        "-c",
        `import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
print("writing", flush=True)
i = 0
while True:
    os.pwrite(fd, os.urandom(4096), (i * 4096) % ${size})
    i += 1`,
        `${dir}/src/big`,
      ],
      stdout: "piped",
      stderr: "null",
    }).spawn();
    try {
      const reader = writer.stdout.getReader();
      await reader.read(); // "writing": the writer runs
      reader.releaseLock();
      const verified = await run([...DENIT, "copy", "--verify", `${dir}/src/.`, `${dir}/v`]);
      assertEquals(verified.code, 1, verified.stderr);
      assertMatch(verified.stderr, /Verification failed for ".*\/v\/big": contents differ/);
      assertOk(!(await Deno.lstat(`${dir}/v/big`).then(() => true, () => false)));
      const plain = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/p`]);
      assertEquals(plain.code, 0, plain.stderr);
    } finally {
      writer.kill("SIGKILL");
      await writer.status;
      await writer.stdout.cancel().catch(() => {/* already closed */});
    }
  });
});

Deno.test("--verify catches a copy that differs from an unchanged source (a write the disk lost)", async () => {
  await withDirs(async (dir) => {
    await Deno.mkdir(`${dir}/src`);
    await Deno.writeFile(`${dir}/src/data`, crypto.getRandomValues(new Uint8Array(65536)));
    // The first copy_file_range says it copied 4 KiB and wrote nothing: the copy has a hole.
    const lose = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=copy_file_range"]
      .concat(["-e", "inject=copy_file_range:retval=4096:when=1"]);
    const verified = await run([...lose, ...DENIT, "copy", "--verify", `${dir}/src/.`, `${dir}/v`]);
    assertEquals(verified.code, 1, verified.stderr);
    assertMatch(verified.stderr, /Verification failed for ".*\/v\/data": contents differ/);
    // Without --verify the same loss goes unseen: what the flag is for.
    const plain = await run([...lose, ...DENIT, "copy", `${dir}/src/.`, `${dir}/p`]);
    assertEquals(plain.code, 0, plain.stderr);
    assertOk(
      !equalBytes(await Deno.readFile(`${dir}/p/data`), await Deno.readFile(`${dir}/src/data`)),
    );
  });
});

Deno.test("--dry-run prints the plan and writes nothing", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    const dry = await run([...DENIT, "copy", "--dry-run", `${dir}/src`, `${dir}/dry`]);
    assertEquals(dry.code, 0);
    assertMatch(dry.stdout, /^mkdir .*\/dry\/src\n/m);
    assertMatch(dry.stdout, /^copy .*\/src\/blob -> .*\/dry\/src\/blob$/m);
    assertMatch(dry.stdout, /^link .*\/dry\/src\/outside-link -> \/etc\/passwd$/m);
    assertOk(!(await Deno.lstat(`${dir}/dry`).then(() => true, () => false)));
  });
});

Deno.test("usage errors exit 2 with one line", async () => {
  const cases = [
    ["copy"],
    ["copy", "/tmp"],
    ["copy", "--chown", "nobody-such-user:0", "/a", "/b"],
    ["copy", "--chown", "new\nline\x1b[1m:0", "/a", "/b"],
    ["copy", "--chown", "12", "/a", "/b"],
    ["copy", "--chmod", "rwx", "/a", "/b"],
    ["copy", "--bogus", "/a", "/b"],
    ["init"],
    ["init", "/a", "/b"],
  ];
  for (const args of cases) {
    const result = await run([...DENIT, ...args]);
    assertEquals(result.code, 2, args.join(" "));
    const lines = result.stderr.trimEnd().split("\n");
    assertEquals(lines.length, 3, result.stderr);
    assertMatch(lines[0] ?? "", /^denit: /);
    // A value's control characters are escaped: the message stays one line, the terminal as it was.
    const controls = [...result.stderr].filter((char) => char < " " && char !== "\n");
    assertEquals(controls, [], JSON.stringify(result.stderr));
  }
});

Deno.test({
  name: "disk full: exit 1 naming the file, DEST as it was (no file of the copy, no temporary)",
  ignore: !CAN_UNSHARE, // mounting a small tmpfs needs root
  async fn() {
    await withDirs(async (dir) => {
      await Deno.mkdir(`${dir}/src`);
      await Deno.mkdir(`${dir}/mnt`);
      await Deno.writeFile(`${dir}/src/small`, new Uint8Array(1000));
      const big = new Uint8Array(3 << 20).fill(7);
      await Deno.writeFile(`${dir}/src/zbig`, big);
      // A private mount namespace: the 1 MiB tmpfs disappears with the command.
      const script = `mount -t tmpfs -o size=1m tmpfs "$1" && mkdir "$1/existing" && \
      ${DENIT_SHELL} copy "$2/." "$1/existing"; code=$?; ls -A "$1/existing"; exit $code`;
      const result = await run(
        [
          "unshare",
          "--mount",
          "sh",
          "-c",
          script,
          "sh",
          `${dir}/mnt`,
          `${dir}/src`,
        ].map((a) => a),
        { timeoutMs: 30_000 },
      ).catch((err) => {
        throw err;
      });
      assertEquals(result.code, 1, result.stderr);
      assertEquals(
        result.stderr,
        `denit copy: Cannot write "${dir}/mnt/existing/zbig": No space left on device\n`,
      );
      // Nothing in DEST changes before the whole copy is done: not even the file that fit.
      assertEquals(result.stdout, "");
    });
  },
});

Deno.test("SIGTERM during a copy: exit 143 and no temporary file left", async () => {
  await withDirs(async (dir) => {
    await Deno.mkdir(`${dir}/src/many`, { recursive: true });
    for (let i = 0; i < 5000; i++) writeFixture(`${dir}/src/many/f${i}`, new Uint8Array(512));
    await Deno.mkdir(`${dir}/dest`);
    await Deno.writeTextFile(`${dir}/dest/kept`, "existing\n");
    const proc = new Running([...DENIT, "copy", "-v", `${dir}/src/.`, `${dir}/dest`]);
    try {
      // -v lines go to stderr; wait for copying to be under way through the filesystem.
      await waitUntil(() => {
        const staged = names(`${dir}/dest`).find((name) => name.startsWith(".denit-"));
        return staged !== undefined && names(`${dir}/dest/${staged}`).length > 10;
      }, "the copy to be under way");
      proc.kill("SIGTERM");
      const status = await proc.status();
      assertEquals(status.code, 143, status.stderr);
      assertMatch(status.stderr, /interrupted by signal 15; no temporary file left\n$/);
      assertEquals(names(`${dir}/dest`), ["kept"]);
    } finally {
      await proc.stop();
    }
  });
});

Deno.test("a tree of 2,500 files is copied exactly", async () => {
  await withDirs(async (dir) => {
    for (let d = 0; d < 25; d++) {
      await Deno.mkdir(`${dir}/src/d${d}`, { recursive: true });
      for (let f = 0; f < 100; f++) {
        const path = `${dir}/src/d${d}/f${f}`;
        writeFixture(path, new TextEncoder().encode(`${d}/${f}\n`.repeat(f)), 0o600 + f % 8);
        await Deno.utime(
          path,
          new Date(1_000_000_000_000 + f),
          new Date(1_100_000_000_000 + d * 1000 + f),
        );
      }
    }
    const result = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
    assertEquals(result.code, 0, result.stderr);
    assertMatch(result.stderr, /^denit copy: 2500 files, 26 directories, 0 links/);
    assertEquals(await tree(`${dir}/dest`), await tree(`${dir}/src`));
    assertEquals(await Deno.readTextFile(`${dir}/dest/d7/f3`), "7/3\n7/3\n7/3\n");
  });
});

Deno.test({
  name: "device files are skipped without being opened",
  ignore: !CAN_UNSHARE, // mknod needs root
  async fn() {
    await withDirs(async (dir) => {
      await makeSource(`${dir}/src`);
      // A character device like /dev/zero: opening and reading it would never end.
      assertEquals((await run(["mknod", `${dir}/src/zero`, "c", "1", "5"])).code, 0);
      const result = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`], {
        timeoutMs: 15_000,
      });
      assertEquals(result.code, 0, result.stderr);
      assertMatch(result.stderr, /skipping ".*\/zero": it is a char-device\n/);
      assertOk(!(await Deno.lstat(`${dir}/dest/zero`).then(() => true, () => false)));
    });
  },
});

Deno.test({
  name: "an unreadable file and an unwritable DEST fail with one line, leaving nothing",
  ignore: !CAN_UNSHARE, // dropping to another user needs root
  async fn() {
    await withDirs(async (dir) => {
      await Deno.chmod(dir, 0o755);
      await makeSource(`${dir}/src`);
      await Deno.chmod(`${dir}/src/.config`, 0o755);
      await Deno.chmod(`${dir}/src/.config/deep/er/settings`, 0o600); // root's, unreadable to 65534
      await Deno.mkdir(`${dir}/out`, { mode: 0o777 });
      await Deno.chmod(`${dir}/out`, 0o777);
      const asNobody = [
        ...["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
        ...await denitForAnyUser(dir),
      ];
      const unreadable = await run([...asNobody, "copy", `${dir}/src/.`, `${dir}/out/dest`]);
      assertEquals(unreadable.code, 1, unreadable.stderr);
      assertEquals(
        unreadable.stderr,
        `denit copy: Cannot read "${dir}/src/.config/deep/er/settings": Permission denied\n`,
      );
      assertEquals(names(`${dir}/out`), []);
      await Deno.mkdir(`${dir}/locked`, { mode: 0o755 });
      await Deno.chmod(`${dir}/locked`, 0o755); // root's, not writable by 65534
      const unwritable = await run([...asNobody, "copy", `${dir}/src/blob`, `${dir}/locked`]);
      assertEquals(unwritable.code, 1, unwritable.stderr);
      assertMatch(
        unwritable.stderr,
        /^denit copy: Cannot write ".*\/locked\/blob": Permission denied\n$/,
      );
      assertEquals(names(`${dir}/locked`), []);
    });
  },
});

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

/** Runs a shell script (fixtures with names no Deno path can spell). */
async function sh(script: string, ...args: string[]): Promise<string> {
  // Building a fixture of 2,030 levels takes a while on a loaded machine: not a figure.
  const result = await run(["sh", "-c", script, "sh", ...args], { timeoutMs: 180_000 });
  assertEquals(result.code, 0, result.stderr);
  return result.stdout;
}

/** A listing of a tree with raw names (hex), kinds, sizes, link targets and modes, via find. */
async function rawTree(root: string): Promise<string> {
  const out = await sh(
    `cd "$1" && find . -printf '%y %m %s %l|' -print0 | od -An -tx1 | tr -d ' \\n'`,
    root,
  );
  return out;
}

Deno.test("names and link targets that are not UTF-8 are copied byte for byte", async () => {
  await withDirs(async (dir) => {
    await sh(
      `mkdir -p "$1/src/$(printf 'dir\\377')" "$1/dest" && printf one > "$1/src/$(printf 'f\\377\\376')" &&
       printf two > "$1/src/$(printf 'dir\\377')/$(printf 'g\\351')" &&
       ln -s "$(printf 'target\\377')" "$1/src/$(printf 'l\\377')"`,
      dir,
    );
    // Into an existing DEST (the case that used to skip them) and into a new one.
    for (const dest of ["dest", "new"]) {
      const result = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/${dest}`]);
      assertEquals(result.code, 0, result.stderr);
      assertMatch(result.stderr, /2 files, \d+ director(y|ies), 1 link/);
      assertEquals(await rawTree(`${dir}/${dest}`), await rawTree(`${dir}/src`));
    }
  });
});

Deno.test("a name with control characters is one line in messages and in the plan", async () => {
  await withDirs(async (dir) => {
    await sh(`mkdir "$1/src" && mkfifo "$1/src/$(printf 'a\\nb\\033c')"`, dir);
    const refused = await run([...DENIT, "copy", "--strict", `${dir}/src`, `${dir}/dest`]);
    assertEquals(refused.code, 1);
    assertEquals(refused.stderr.trim().split("\n").length, 1, refused.stderr);
    assertMatch(refused.stderr, /src\/a\\x0ab\\x1bc": it is a fifo \(--strict\)/);
    const plan = await run([...DENIT, "copy", "--dry-run", `${dir}/src`, `${dir}/dest`]);
    assertEquals(plan.code, 0, plan.stderr);
    assertMatch(plan.stdout, /^skip .*\/src\/a\\x0ab\\x1bc \(fifo\)$/m);
    assertEquals(plan.stdout.trim().split("\n").length, 2, plan.stdout);
    assertEquals(plan.stderr.trim().split("\n").length, 1, plan.stderr); // "skipping ..."
    // An argument too: DEST names a file.
    await sh(`touch "$1/$(printf 'x\\ny')"`, dir);
    const notDir = await run([...DENIT, "copy", `${dir}/src`, `${dir}/x\ny`]);
    assertEquals(notDir.code, 1);
    assertEquals(notDir.stderr.trim().split("\n").length, 1, notDir.stderr);
    assertMatch(notDir.stderr, /x\\x0ay": DEST must be a directory/);
  });
});

Deno.test("a re-run removes what a killed run left; a failed copy leaves no DEST", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    assertEquals((await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`])).code, 0);
    // What SIGKILL leaves: a temporary file beside its target, a half-built directory.
    await Deno.writeTextFile(`${dir}/dest/bin/.denit-0123456789ab`, "half");
    await Deno.mkdir(`${dir}/dest/.denit-abcdef012345/deep`, { recursive: true });
    const again = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
    assertEquals(again.code, 0, again.stderr);
    assertEquals(await tree(`${dir}/dest`), await tree(`${dir}/src`));
    // A copy refused after DEST was made (a FIFO under --strict) leaves no DEST behind.
    await sh(`mkfifo "$1/src/bin/fifo"`, dir);
    const refused = await run([
      ...DENIT,
      "copy",
      "--strict",
      `${dir}/src/.`,
      `${dir}/new/deeper/dest`,
    ]);
    assertEquals(refused.code, 1);
    assertOk(!(await Deno.lstat(`${dir}/new`).then(() => true, () => false)), "DEST left behind");
  });
});

Deno.test("a re-copy that runs out of descriptors halfway changes nothing in DEST", async () => {
  await withDirs(async (dir) => {
    // 60 directories, each changed in the re-copy: a descriptor each waits for the end.
    for (let i = 0; i < 60; i++) {
      await Deno.mkdir(`${dir}/src/d${i}`, { recursive: true });
      await Deno.writeTextFile(`${dir}/src/d${i}/f`, "old\n");
    }
    assertEquals((await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`])).code, 0);
    for (let i = 0; i < 60; i++) await Deno.writeTextFile(`${dir}/src/d${i}/f`, "new\n");
    const short = await run([
      ...["prlimit", "--nofile=48:48", ...DENIT],
      ...["copy", `${dir}/src/.`, `${dir}/dest`],
    ]);
    assertEquals(short.code, 1, short.stderr);
    assertMatch(short.stderr, /^denit copy: Cannot .*: Too many open files\n$/);
    const left = await run([
      "sh",
      "-c",
      `cat "$1"/dest/d*/f | sort -u; ls -A "$1"/dest/d*`,
      "sh",
      dir,
    ]);
    assertEquals(left.stdout.split("\n").filter((line) => line.startsWith(".denit-")), []);
    assertMatch(left.stdout, /^old\n/);
    assertOk(!left.stdout.includes("new"), left.stdout);
  });
});

Deno.test("names of 255 bytes into an existing directory, and a tree 2,030 levels deep", async () => {
  await withDirs(async (dir) => {
    const long = "n".repeat(255);
    await Deno.mkdir(`${dir}/src/sub`, { recursive: true });
    await Deno.writeTextFile(`${dir}/src/sub/${long}`, "long\n");
    for (let run_ = 0; run_ < 2; run_++) {
      await Deno.writeTextFile(`${dir}/src/sub/${long}`, `long ${run_}\n`);
      const result = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
      assertEquals(result.code, 0, result.stderr);
      assertEquals(await Deno.readTextFile(`${dir}/dest/sub/${long}`), `long ${run_}\n`);
    }
    // Deeper than PATH_MAX allows in one path: built and counted relative to each level.
    await sh(
      `cd "$1" && mkdir deep && cd deep && i=0; while [ $i -lt 2030 ]; do mkdir d && cd d; i=$((i+1)); done; echo bottom > f`,
      dir,
    );
    const deep = await run([...DENIT, "copy", `${dir}/deep`, `${dir}/deepcopy`], {
      timeoutMs: 60_000,
    });
    assertEquals(deep.code, 0, deep.stderr);
    assertMatch(deep.stderr, /1 file, 2031 directories/);
    const count = async (root: string) => (await sh(`find "$1" | wc -l`, root)).trim();
    assertEquals(await count(`${dir}/deepcopy/deep`), await count(`${dir}/deep`));
  });
});

Deno.test({
  name: "holes stay holes: a 1 GiB sparse file fits a 64 MiB tmpfs",
  ignore: !CAN_UNSHARE,
  async fn() {
    await withDirs(async (dir) => {
      await Deno.mkdir(`${dir}/src`);
      await Deno.mkdir(`${dir}/mnt`);
      // 12 KiB of data at the start, middle and end of 1 GiB.
      await sh(
        `f="$1/src/sparse"; truncate -s 1G "$f";
         for at in 0 524288 1048572; do head -c 4096 /dev/urandom | dd of="$f" bs=1024 seek=$at conv=notrunc status=none; done`,
        dir,
      );
      const script =
        `mount -t tmpfs -o size=64m tmpfs "$1" && ${DENIT_SHELL} copy "$2/." "$1/out" &&
        cmp "$2/sparse" "$1/out/sparse" && stat -c '%s %b' "$1/out/sparse"`;
      const result = await run([
        "unshare",
        "--mount",
        "sh",
        "-c",
        script,
        "sh",
        `${dir}/mnt`,
        `${dir}/src`,
      ], {
        timeoutMs: 60_000,
      });
      assertEquals(result.code, 0, result.stderr);
      const [size, blocks] = result.stdout.trim().split(" ").map(Number);
      assertEquals(size, 1 << 30);
      assertOk((blocks ?? Infinity) * 512 <= 64 * 1024, `${blocks} blocks allocated`);
    });
  },
});

Deno.test("hard links stay links within one copy", async () => {
  await withDirs(async (dir) => {
    await Deno.mkdir(`${dir}/src/a`, { recursive: true });
    await Deno.mkdir(`${dir}/src/b`);
    await Deno.writeFile(`${dir}/src/a/big`, new Uint8Array(10 << 20).fill(3));
    for (const name of ["a/two", "b/three", "b/four", "five"]) {
      await Deno.link(`${dir}/src/a/big`, `${dir}/src/${name}`);
    }
    for (const dest of ["new", "new"]) {
      const result = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/${dest}`]);
      assertEquals(result.code, 0, result.stderr);
    }
    const inodes = new Set<number | null>();
    for (const name of ["a/big", "a/two", "b/three", "b/four", "five"]) {
      inodes.add((await Deno.lstat(`${dir}/new/${name}`)).ino);
    }
    assertEquals(inodes.size, 1, "the names are not one file");
    assertEquals((await Deno.lstat(`${dir}/new/five`)).nlink, 5);
  });
});

Deno.test("extended attributes and file capabilities are copied, or warned about", async () => {
  await withDirs(async (dir) => {
    await Deno.mkdir(`${dir}/src`);
    await Deno.writeTextFile(`${dir}/src/server`, "#!/bin/sh\n", { mode: 0o755 });
    await sh(`setcap cap_net_bind_service=+ep "$1/src/server"`, dir);
    await run([
      "python3",
      "-c",
      `import os; os.setxattr("${dir}/src/server", "user.origin", b"build 7")`,
    ]);
    const result = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
    assertEquals(result.code, 0, result.stderr);
    assertEquals(
      (await sh(`getcap "$1/dest/server"`, dir)).trim(),
      `${dir}/dest/server cap_net_bind_service=ep`,
    );
    const attr = await run([
      "python3",
      "-c",
      `import os; print(os.getxattr("${dir}/dest/server", "user.origin").decode())`,
    ]);
    assertEquals(attr.stdout, "build 7\n");
  });
});

Deno.test({
  name: "a directory's and a symlink's own extended attributes are copied",
  ignore: !CAN_UNSHARE, // needs root: a symlink takes trusted.* attributes only
  async fn() {
    await withDirs(async (dir) => {
      await Deno.mkdir(`${dir}/src/etc`, { recursive: true });
      await Deno.symlink("etc", `${dir}/src/link`);
      const python = (code: string) => run(["python3", "-c", `import os; ${code}`]);
      await python(
        `os.setxattr("${dir}/src/etc", "user.origin", b"dir 7"); ` +
          `os.setxattr("${dir}/src/link", "trusted.origin", b"link 7", follow_symlinks=False)`,
      );
      const result = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
      assertEquals(result.code, 0, result.stderr);
      const read = await python(
        `print(os.getxattr("${dir}/dest/etc", "user.origin").decode(), ` +
          `os.getxattr("${dir}/dest/link", "trusted.origin", follow_symlinks=False).decode())`,
      );
      assertEquals(read.stdout, "dir 7 link 7\n", read.stderr);
      // An existing directory whose source changed gets the source's attributes too.
      await python(`os.setxattr("${dir}/src/etc", "user.origin", b"dir 8")`);
      await Deno.utime(`${dir}/src/etc`, new Date(1_600_000_000_000), new Date(1_600_000_000_000));
      const again = await run([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
      assertEquals(again.code, 0, again.stderr);
      const updated = await python(`print(os.getxattr("${dir}/dest/etc", "user.origin").decode())`);
      assertEquals(updated.stdout, "dir 8\n", updated.stderr);
    });
  },
});

Deno.test({
  name: "an attribute the copier may not set is warned about once and counted",
  ignore: !CAN_UNSHARE, // needs root, to copy as another user
  async fn() {
    await withDirs(async (dir) => {
      await Deno.mkdir(`${dir}/src`);
      await Deno.writeTextFile(`${dir}/src/server`, "#!/bin/sh\n", { mode: 0o755 });
      await sh(`setcap cap_net_bind_service=+ep "$1/src/server"`, dir);
      await Deno.chmod(dir, 0o755);
      await Deno.mkdir(`${dir}/out`, { mode: 0o777 });
      await Deno.chmod(`${dir}/out`, 0o777);
      const asNobody = [
        ...["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
        ...await denitForAnyUser(dir),
      ];
      const denied = await run([...asNobody, "copy", `${dir}/src/.`, `${dir}/out/dest`]);
      assertEquals(denied.code, 0, denied.stderr);
      assertMatch(
        denied.stderr,
        /warning: cannot copy the extended attribute "security\.capability" of ".*\/server": Operation not permitted/,
      );
      assertMatch(denied.stderr, /1 attribute not copied\n$/);
    });
  },
});

Deno.test("SRC/ follows a symlink to a directory, as cp -a SRC/ does; SRC copies the link", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/real`);
    await Deno.symlink(`${dir}/real`, `${dir}/alias`);
    const followed = await run([...DENIT, "copy", `${dir}/alias/`, `${dir}/dest`]);
    assertEquals(followed.code, 0, followed.stderr);
    assertOk((await Deno.lstat(`${dir}/dest/alias`)).isDirectory);
    assertEquals(await tree(`${dir}/dest/alias`), await tree(`${dir}/real`));
    const link = await run([...DENIT, "copy", `${dir}/alias`, `${dir}/links`]);
    assertEquals(link.code, 0, link.stderr);
    assertOk((await Deno.lstat(`${dir}/links/alias`)).isSymlink);
  });
});

Deno.test("a directory of DEST swapped for a symlink during the copy: nothing lands outside", async () => {
  await withDirs(async (dir) => {
    await Deno.mkdir(`${dir}/src/sub`, { recursive: true });
    for (let i = 0; i < 3000; i++) writeFixture(`${dir}/src/sub/f${i}`, new Uint8Array(256));
    await Deno.mkdir(`${dir}/dest/sub`, { recursive: true });
    await Deno.mkdir(`${dir}/outside`, { mode: 0o700 });
    await Deno.chmod(`${dir}/outside`, 0o700);
    const proc = new Running([...DENIT, "copy", `${dir}/src/.`, `${dir}/dest`]);
    try {
      await waitUntil(() => names(`${dir}/dest/sub`).length > 50, "the copy to be under way");
      // Stopped mid-copy, the directory it writes into is replaced by a symlink to elsewhere.
      proc.kill("SIGSTOP");
      await Deno.rename(`${dir}/dest/sub`, `${dir}/dest/moved`);
      await Deno.symlink(`${dir}/outside`, `${dir}/dest/sub`);
      proc.kill("SIGCONT");
      const status = await proc.status(30_000);
      assertOk(status.code === 0 || status.code === 1, status.stderr);
      assertEquals(names(`${dir}/outside`), [], "written through the symlink");
      assertEquals((await Deno.stat(`${dir}/outside`)).mode! & 0o777, 0o700);
    } finally {
      proc.kill("SIGCONT");
      await proc.stop();
    }
  });
});

Deno.test("DEST must be a directory: one line says so; usage errors say what is missing", async () => {
  await withDirs(async (dir) => {
    await makeSource(`${dir}/src`);
    await Deno.writeTextFile(`${dir}/file`, "x");
    const result = await run([...DENIT, "copy", `${dir}/src/blob`, `${dir}/file`]);
    assertEquals(result.code, 1);
    assertEquals(
      result.stderr,
      `denit copy: Cannot copy into "${dir}/file": DEST must be a directory (it is created if missing)\n`,
    );
    const usage = await run([...DENIT, "copy", `${dir}/src`]);
    assertEquals(usage.code, 2);
    assertEquals(usage.stderr.split("\n").slice(0, 2), [
      "denit: Missing SRC or DEST: copy takes one or more SRC, then DEST",
      "Usage: denit copy [OPTIONS] SRC... DEST",
    ]);
    const one = await run([...DENIT, "copy", `${dir}/src/blob`, `${dir}/single`]);
    assertMatch(one.stderr, /^denit copy: 1 file, 0 directories, 0 links, /);
  });
});
