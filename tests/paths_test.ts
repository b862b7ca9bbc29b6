/** Units: the POSIX path helpers that stand in for node:path. */

import { posix } from "node:path";
import { assertEquals } from "./assert.ts";
import { basename, dirname, join, normalize, resolve } from "../src/common/paths.ts";

const SAMPLES = [
  "/",
  "/a",
  "/a/",
  "a",
  "a/b/c",
  "/a//b/./c/..",
  "../x",
  "./",
  ".",
  "/a/b/../../..",
  "x/../..",
];

Deno.test("paths agree with node:path's posix functions", () => {
  for (const path of SAMPLES) {
    assertEquals(
      normalize(path),
      posix.normalize(path).replace(/(.)\/$/, "$1"),
      `normalize ${path}`,
    );
    assertEquals(basename(path), posix.basename(path), `basename ${path}`);
    assertEquals(dirname(path), posix.dirname(path), `dirname ${path}`);
    assertEquals(resolve(path), posix.resolve(path), `resolve ${path}`);
    assertEquals(
      join("/base", path),
      posix.join("/base", path).replace(/(.)\/$/, "$1"),
      `join ${path}`,
    );
  }
  assertEquals(resolve("/a", "b", "../c"), "/a/c");
});
