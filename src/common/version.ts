/** denit's version; a test checks that deno.json says the same. */
export const VERSION = "0.1.0";
