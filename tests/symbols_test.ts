/** The C library table: each symbol bound on its first call, compiled once it is called often. */

import { assertEquals, assertOk } from "./assert.ts";
import { Errno, errno, libc, LIBC_SYMBOLS } from "../src/sys/symbols.ts";

Deno.test("libc: nothing is bound before it is used; a first call binds it", () => {
  assertEquals(Object.getOwnPropertyDescriptor(libc, "lsetxattr"), undefined, "bound at load");
  assertEquals(Object.getOwnPropertyDescriptor(libc, "tcgetpgrp"), undefined, "bound at load");
  assertEquals(libc.tcgetpgrp(-1), -1);
  assertEquals(errno(), Errno.EBADF);
  const bound = Object.getOwnPropertyDescriptor(libc, "tcgetpgrp");
  assertEquals(bound?.get, undefined);
  assertEquals(typeof bound?.value, "function");
  // Every symbol of every group is found: a function, a variable's address, or null for an
  // optional function this C library lacks.
  for (const key of Object.keys(LIBC_SYMBOLS)) {
    const value: unknown = libc[key as keyof typeof libc];
    const optional = "optional" in LIBC_SYMBOLS[key as keyof typeof LIBC_SYMBOLS];
    assertOk(
      typeof value === "function" || (typeof value === "object" && (value !== null || optional)),
      `${key}: ${typeof value}`,
    );
  }
  assertEquals(Object.keys(libc).sort(), Object.keys(LIBC_SYMBOLS).sort());
});

Deno.test("libc: a function called 64 times gets a compiled trampoline in its place", () => {
  const first = libc.getdents64;
  // getdents64 on a descriptor that is not open: EBADF every time, harmlessly.
  for (let i = 0; i < 63; i++) libc.getdents64(-1, new Uint8Array(64), 64n);
  assertEquals(libc.getdents64, first, "compiled too early");
  libc.getdents64(-1, new Uint8Array(64), 64n);
  assertOk(libc.getdents64 !== first, "never compiled");
  // The compiled one behaves the same, and errno still belongs to the call just made.
  assertEquals(Number(libc.getdents64(-1, new Uint8Array(64), 64n)), -1);
  assertEquals(errno(), 9); // EBADF
});

Deno.test("libc: errno right after a call through the address path", () => {
  assertEquals(libc.kill(0x7ffffff0, 0), -1); // no such process
  assertEquals(errno(), Errno.ESRCH);
  // A variable is its address, not a function.
  assertOk(libc.environ !== null && typeof libc.environ === "object");
});
