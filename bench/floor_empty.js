// Deno floor: an empty program (with "sleep", one that stays alive for the memory figure).
if (Deno.args[0] === "sleep") setTimeout(() => {}, 30_000);
