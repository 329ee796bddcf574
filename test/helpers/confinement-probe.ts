/**
 * What a hostile bare-metal job tries, to act as the operator: read the admin token file, the
 * database files, another agent's workspace and the orchestrator's home, harvest anything that looks
 * like a token from /proc, and call the admin API with every secret it found. It prints one
 * `key=value` line per attempt and always exits 0, so the test asserts each attempt on its own.
 */
export interface ProbeTargets {
  /** The orchestrator's URL as the job can reach it. */
  url: string;
  tokenFile: string;
  dataDir: string;
  /** Another agent's work dir, holding a file named `secret`. */
  otherWorkDir: string;
  orchestratorHome: string;
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export function attackScript(t: ProbeTargets): string {
  return [
    'found=""',
    `attempt() { if v=$(cat "$2" 2>/dev/null) && [ -n "$v" ]; then echo "$1=read"; found="$found $v"; else echo "$1=denied"; fi; }`,
    `attempt token ${q(t.tokenFile)}`,
    `attempt database ${q(`${t.dataDir}/pg/PG_VERSION`)}`,
    `attempt workspace ${q(`${t.otherWorkDir}/secret`)}`,
    `echo "data-entries=$(ls -A ${q(t.dataDir)} 2>/dev/null | wc -l)"`,
    `echo "home-entries=$(ls -A ${q(t.orchestratorHome)} 2>/dev/null | wc -l)"`,
    // Any token another process was started with.
    `for v in $(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -E '^KICI_[A-Z_]*TOKEN=' | cut -d= -f2-); do found="$found $v"; done`,
    'echo "candidates=$(echo $found | wc -w)"',
    // With nothing found, one call with an empty token still shows the API was reached.
    `for tok in "" $found; do`,
    `  node -e 'fetch(process.argv[1] + "/api/v1/access/tokens", { headers: { authorization: "Bearer " + process.argv[2] } }).then((r) => console.log("api=" + r.status), (e) => console.log("api=error " + e.message))' ${q(t.url)} "$tok"`,
    'done',
  ].join('\n');
}

/** The `key=value` lines of a probe's output, the `api=` ones collected. */
export function probeResults(lines: string[]): { get(key: string): string | undefined; api: string[] } {
  const get = (k: string) => lines.find((l) => l.startsWith(`${k}=`))?.slice(k.length + 1);
  const api = lines.filter((l) => l.startsWith('api=')).map((l) => l.slice(4));
  return { get, api };
}

/**
 * A job that writes a secret into its own work dir, says where that is, and waits until the test
 * drops a `go` file there (the host sees the work dir under every confinement mode).
 */
export const victimScript = [
  'echo "victim-secret-$(date +%s%N)" > "$KICI_WORK_DIR/secret"',
  'echo "work=$KICI_WORK_DIR"',
  'n=0; while [ ! -e "$KICI_WORK_DIR/go" ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done',
].join('\n');
