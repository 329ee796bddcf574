// The dashboard's pages. Each reads the JSON API through useLive, so it follows the live stream.
import { h } from '/ui/vendor/preact.mjs';
import { useEffect, useRef, useState } from '/ui/vendor/hooks.mjs';
import htm from '/ui/vendor/htm.mjs';
import { api, useLive } from '/ui/app.js';

const html = htm.bind(h);
const FINAL = ['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend'];
const STATES = ['queued', 'dispatched', 'running', ...FINAL];

const State = ({ s }) => html`<span class="state ${s}" data-state=${s}>${s}</span>`;
const When = ({ t }) =>
  t ? html`<span title=${t}>${new Date(t).toLocaleTimeString()}</span>` : html`<span class="muted">—</span>`;
const secs = (ms) => (ms >= 60_000 ? `${Math.round(ms / 60_000)} min` : `${Math.ceil(ms / 1000)} s`);

function Loading({ state, children }) {
  if (state.error && state.data === undefined) return html`<p class="error">${state.error}</p>`;
  if (state.data === undefined) return html`<p class="muted">Loading…</p>`;
  return html`${state.error ? html`<p class="error">${state.error}</p>` : null}${children(state.data)}`;
}

function Bar({ used, max }) {
  const pct = max ? Math.min(100, Math.round((used / max) * 100)) : 0;
  return html`<div class="bar" title="${used} of ${max}"><span style=${{ width: pct + '%' }}></span></div>`;
}

export function Overview() {
  const st = useLive(async () => {
    const [queued, scaler, agents] = await Promise.all([
      api('/api/v1/jobs?state=queued&limit=1000'),
      api('/api/v1/scaler/status'),
      api('/api/v1/agents'),
    ]);
    return { queued: queued.jobs, scaler, agents: agents.agents };
  });
  return html`<${Loading} state=${st}
    >${({ queued, scaler, agents }) => {
      const groups = new Map();
      for (const j of queued) {
        const key = [...j.runsOn].sort().join(',');
        const g = groups.get(key) ?? { key, jobs: [], waiting: j.waiting };
        g.jobs.push(j);
        g.waiting = j.waiting ?? g.waiting;
        groups.set(key, g);
      }
      const byBackend = new Map();
      for (const s of scaler.scalers ?? [])
        for (const a of s.agents) {
          const k = `${s.type} / ${a.phase}`;
          byBackend.set(k, (byBackend.get(k) ?? 0) + 1);
        }
      const statics = agents.filter((a) => a.kind === 'static');
      for (const a of statics)
        byBackend.set(`static / ${a.state}`, (byBackend.get(`static / ${a.state}`) ?? 0) + 1);
      const backoffs = (scaler.scalers ?? []).flatMap((s) =>
        s.backoff.map((b) => ({ scaler: s.name, ...b })),
      );
      const failures = [
        ...backoffs
          .filter((b) => b.lastError)
          .map((b) => ({
            where: `${b.scaler} [${b.labelSet}]`,
            reason: b.lastError.kind ? `${b.lastError.kind}: ${b.lastError.message}` : String(b.lastError),
          })),
        ...queued
          .filter((j) => j.lastProvisioningError)
          .map((j) => ({ where: `job ${j.name}`, reason: j.lastProvisioningError })),
      ];
      return html` <section id="queue">
          <h2>Queue by label set</h2>
          ${
            groups.size === 0
              ? html`<p class="muted">No job is waiting.</p>`
              : html`<table>
                  <tr>
                    <th>Label set</th>
                    <th>Jobs</th>
                    <th>Waiting because</th>
                  </tr>
                  ${[...groups.values()].map(
                    (g) =>
                      html`<tr>
                        <td><code>${g.key}</code></td>
                        <td>${g.jobs.length}</td>
                        <td>${g.waiting ?? html`<span class="muted">being dispatched</span>`}</td>
                      </tr>`,
                  )}
                </table>`
          }
        </section>
        <div class="grid2">
          <section id="fleet">
            <h2>Agents by backend and phase</h2>
            ${
              byBackend.size === 0
                ? html`<p class="muted">No agent.</p>`
                : html`<table>
                    <tr>
                      <th>Backend / phase</th>
                      <th>Agents</th>
                    </tr>
                    ${[...byBackend].map(
                      ([k, n]) =>
                        html`<tr>
                          <td>${k}</td>
                          <td>${n}</td>
                        </tr>`,
                    )}
                  </table>`
            }
          </section>
          <section id="caps">
            <h2>Caps in use</h2>
            ${
              scaler.configured
                ? html`<table>
                    <tr>
                      <th>Scaler</th>
                      <th>Agents</th>
                      <th></th>
                    </tr>
                    <tr>
                      <td><b>all scalers</b></td>
                      <td>${scaler.globalReserved} / ${scaler.globalMaxAgents}</td>
                      <td><${Bar} used=${scaler.globalReserved} max=${scaler.globalMaxAgents} /></td>
                    </tr>
                    ${scaler.scalers.map(
                      (s) =>
                        html`<tr>
                          <td>${s.name} <span class="muted">${s.type}</span></td>
                          <td>${s.reserved} / ${s.maxAgents}</td>
                          <td><${Bar} used=${s.reserved} max=${s.maxAgents} /></td>
                        </tr>`,
                    )}
                  </table>`
                : html`<p class="muted">No scaler is configured.</p>`
            }
          </section>
        </div>
        <section id="backoffs">
          <h2>Active backoffs</h2>
          ${
            backoffs.length === 0
              ? html`<p class="muted">None.</p>`
              : html`<table>
                  <tr>
                    <th>Scaler</th>
                    <th>Label set</th>
                    <th>Failures</th>
                    <th>Retry in</th>
                  </tr>
                  ${backoffs.map(
                    (b) =>
                      html`<tr>
                        <td>${b.scaler}</td>
                        <td><code>${b.labelSet}</code></td>
                        <td>${b.consecutiveFailures}</td>
                        <td>${secs(b.retryInMs)}</td>
                      </tr>`,
                  )}
                </table>`
          }
        </section>
        <section id="spawn-failures">
          <h2>Recent spawn failures</h2>
          ${
            failures.length === 0
              ? html`<p class="muted">None.</p>`
              : html`<table>
                  <tr>
                    <th>Where</th>
                    <th>Reason</th>
                  </tr>
                  ${failures.map(
                    (f) =>
                      html`<tr class="spawn-failure">
                        <td>${f.where}</td>
                        <td>${f.reason}</td>
                      </tr>`,
                  )}
                </table>`
          }
        </section>`;
    }}<//
  >`;
}

export function Jobs({ params }) {
  const state = params.get('state') ?? '';
  const runId = params.get('run') ?? '';
  const label = params.get('label') ?? '';
  const st = useLive(async () => {
    const q = new URLSearchParams({ limit: '200' });
    if (state) q.set('state', state);
    if (runId) q.set('runId', runId);
    return (await api('/api/v1/jobs?' + q)).jobs;
  }, [state, runId]);
  const go = (k, v) => {
    const p = new URLSearchParams(params);
    if (v) p.set(k, v);
    else p.delete(k);
    location.hash = '#/jobs?' + p;
  };
  return html`<section>
    <h2>Jobs</h2>
    <div class="filters">
      <select aria-label="state" value=${state} onChange=${(e) => go('state', e.target.value)}>
        <option value="">any state</option>
        ${STATES.map((s) => html`<option value=${s}>${s}</option>`)}
      </select>
      <input
        aria-label="label"
        placeholder="label"
        value=${label}
        onChange=${(e) => go('label', e.target.value)}
      />
      <input
        aria-label="run"
        placeholder="run id"
        value=${runId}
        onChange=${(e) => go('run', e.target.value)}
      />
    </div>
    <${Loading} state=${st}
      >${(jobs) => {
        const shown = label ? jobs.filter((j) => j.runsOn.includes(label)) : jobs;
        return shown.length === 0
          ? html`<p class="muted">No job matches.</p>`
          : html`<table id="jobs">
              <tr>
                <th>Job</th>
                <th>State</th>
                <th>Runs on</th>
                <th>Run</th>
                <th>Created</th>
                <th>Agent</th>
              </tr>
              ${shown.map(
                (j) =>
                  html`<tr data-job=${j.id}>
                    <td><a href="#/jobs/${j.id}">${j.name}</a></td>
                    <td><${State} s=${j.state} /></td>
                    <td><code>${j.runsOn.join(',')}</code></td>
                    <td>
                      <a href="#/jobs?run=${j.runId}"><code>${j.runId.slice(0, 8)}</code></a>
                    </td>
                    <td><${When} t=${j.createdAt} /></td>
                    <td><code>${j.agentId ?? ''}</code></td>
                  </tr>`,
              )}
            </table>`;
      }}<//
    >
  </section>`;
}

export function Job({ id }) {
  const job = useLive(() => api(`/api/v1/jobs/${id}`), [id]);
  // The log is read incrementally (`after` the last line id) so a long log is not fetched again.
  const [lines, setLines] = useState([]);
  const lastId = useRef(undefined);
  useLive(async () => {
    const q = lastId.current === undefined ? '' : `?after=${lastId.current}`;
    const body = await api(`/api/v1/jobs/${id}/logs${q}`);
    if (body.lines.length) {
      lastId.current = body.lines.at(-1).id;
      setLines((old) => [...old, ...body.lines]);
    }
    return body.lines.length;
  }, [id]);
  const pre = useRef(null);
  useEffect(() => {
    if (pre.current) pre.current.scrollTop = pre.current.scrollHeight;
  }, [lines.length]);
  const steps = new Map();
  for (const l of lines) {
    if (l.step === null) continue;
    const s = steps.get(l.step) ?? { first: l.ts, last: l.ts, n: 0 };
    s.last = l.ts;
    s.n++;
    steps.set(l.step, s);
  }
  return html`<${Loading} state=${job}
    >${(j) =>
      html` <section>
          <h2>Job ${j.name} <${State} s=${j.state} /></h2>
          <table>
            <tr>
              <th>Id</th>
              <td><code>${j.id}</code></td>
              <th>Run</th>
              <td>
                <a href="#/jobs?run=${j.runId}"><code>${j.runId}</code></a>
              </td>
            </tr>
            <tr>
              <th>Runs on</th>
              <td><code>${j.runsOn.join(',')}</code></td>
              <th>Agent</th>
              <td><code>${j.agentId ?? '—'}</code></td>
            </tr>
            <tr>
              <th>Created</th>
              <td><${When} t=${j.createdAt} /></td>
              <th>Started</th>
              <td><${When} t=${j.startedAt} /></td>
            </tr>
            <tr>
              <th>Finished</th>
              <td><${When} t=${j.finishedAt} /></td>
              <th>Exit code</th>
              <td>${j.exitCode ?? '—'}</td>
            </tr>
            ${
              j.waiting
                ? html`<tr>
                    <th>Waiting</th>
                    <td colspan="3">${j.waiting} <a href="#/scalers?job=${j.id}">explain</a></td>
                  </tr>`
                : null
            }
            ${
              j.reason
                ? html`<tr>
                    <th>Reason</th>
                    <td colspan="3">${j.reason}</td>
                  </tr>`
                : null
            }
          </table>
        </section>
        <section>
          <h2>Steps</h2>
          ${
            steps.size === 0
              ? html`<p class="muted">No step has written output yet.</p>`
              : html`<table id="steps">
                  <tr>
                    <th>Step</th>
                    <th>First line</th>
                    <th>Last line</th>
                    <th>Lines</th>
                  </tr>
                  ${[...steps].map(
                    ([i, s]) =>
                      html`<tr>
                        <td>${i + 1}</td>
                        <td><${When} t=${s.first} /></td>
                        <td><${When} t=${s.last} /></td>
                        <td>${s.n}</td>
                      </tr>`,
                  )}
                </table>`
          }
        </section>
        <section>
          <h2>Log ${FINAL.includes(j.state) ? '' : html`<span class="muted">(following)</span>`}</h2>
          <pre class="log" id="log" ref=${pre}>
${lines.map((l) => `${l.stream === 'stdout' ? '' : `[${l.stream}] `}${l.line}\n`).join('')}</pre>
        </section>`}<//
  >`;
}

export function Agents() {
  const st = useLive(async () => (await api('/api/v1/agents')).agents);
  const [problem, setProblem] = useState('');
  const act = async (id, what) => {
    try {
      setProblem('');
      await api(`/api/v1/agents/${id}/${what}`, { method: 'POST' });
    } catch (err) {
      setProblem(`${what} ${id}: ${err.message}`);
    }
  };
  return html`<section>
    <h2>Agents</h2>
    ${problem ? html`<p class="error" role="alert">${problem}</p>` : null}
    <${Loading} state=${st}
      >${(agents) =>
        agents.length === 0
          ? html`<p class="muted">No agent is connected.</p>`
          : html`<table id="agents">
              <tr>
                <th>Agent</th>
                <th>Kind</th>
                <th>Scaler</th>
                <th>State</th>
                <th>Job</th>
                <th>Labels</th>
                <th></th>
              </tr>
              ${agents.map(
                (a) =>
                  html`<tr data-agent=${a.id}>
                    <td><code>${a.id}</code></td>
                    <td>${a.kind}</td>
                    <td>${a.scaler ?? ''}</td>
                    <td><${State} s=${a.state} /></td>
                    <td>
                      ${a.jobId ? html`<a href="#/jobs/${a.jobId}"><code>${a.jobId.slice(0, 8)}</code></a>` : ''}
                    </td>
                    <td><code>${a.labels.join(',')}</code></td>
                    <td>
                      ${a.state === 'disconnected' ? null : a.drainedByOperator ? html`<button class="act" onClick=${() => act(a.id, 'resume')}>Resume</button>` : html`<button class="act" onClick=${() => act(a.id, 'drain')}>Drain</button>`}
                    </td>
                  </tr>`,
              )}
            </table>`}<//
    >
  </section>`;
}

export function Scalers({ job }) {
  const [jobId, setJobId] = useState(job);
  const diag = useLive(() => api('/api/v1/scaler/diagnose'));
  const explain = useLive(
    async () => (jobId ? api(`/api/v1/scaler/explain/${encodeURIComponent(jobId)}`) : null),
    [jobId],
  );
  return html` <section>
      <h2>Explain a waiting job</h2>
      <form
        class="filters"
        onSubmit=${(e) => {
          e.preventDefault();
          setJobId(new FormData(e.target).get('job').trim());
        }}
      >
        <input name="job" aria-label="job id" placeholder="job id" value=${jobId} size="40" /><button
          class="act"
        >
          Explain
        </button>
      </form>
      <${Loading} state=${explain}
        >${(x) => (x ? html`<pre id="explain">${x.lines.join('\n')}</pre>` : html`<p class="muted">Paste the id of a queued job.</p>`)}<//
      >
    </section>
    <section>
      <h2>Diagnose</h2>
      <${Loading} state=${diag}
        >${(d) =>
          !d.configured
            ? html`<p class="muted">No scaler is configured.</p>`
            : html`<table id="checks">
                  <tr>
                    <th>Check</th>
                    <th>Status</th>
                    <th>Message</th>
                  </tr>
                  ${(d.checks ?? []).map(
                    (c) =>
                      html`<tr data-check=${c.name}>
                        <td><code>${c.name}</code></td>
                        <td>
                          <span class="state ${c.status.toLowerCase()}" data-status=${c.status}
                            >${c.status}</span
                          >
                        </td>
                        <td>${c.message}</td>
                      </tr>`,
                  )}
                </table>
                <table id="diagnose">
                  <tr>
                    <th>Scaler</th>
                    <th>Finding</th>
                    <th>Fix</th>
                  </tr>
                  ${d.scalers.flatMap((s) =>
                    (s.findings.length ? s.findings : [{ problem: 'no problem found', fix: '' }]).map(
                      (f) =>
                        html`<tr>
                          <td>${s.name}</td>
                          <td>${f.problem}</td>
                          <td>${f.fix}</td>
                        </tr>`,
                    ),
                  )}
                </table>`}<//
      >
    </section>`;
}

/** Any list of flat-ish records as a table: events, deliveries and cluster instances change shape over time. */
function Records({ rows, id }) {
  if (!rows?.length) return html`<p class="muted">None.</p>`;
  const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((k) => k !== 'payload');
  const cell = (v) =>
    v === null || v === undefined ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v);
  return html`<table id=${id}>
    <tr>
      ${cols.map((c) => html`<th>${c}</th>`)}
    </tr>
    ${rows.map(
      (r) =>
        html`<tr>
          ${cols.map((c) => html`<td>${cell(r[c])}</td>`)}
        </tr>`,
    )}
  </table>`;
}

export function Events() {
  const st = useLive(async () => (await api('/api/v1/events')).events);
  return html`<section>
    <h2>Scale events and deliveries</h2>
    <${Loading} state=${st}>${(rows) => html`<${Records} rows=${rows} id="events" />`}<//>
  </section>`;
}

export function Cluster() {
  const st = useLive(() => api('/api/v1/cluster/status'));
  return html`<section>
    <h2>Cluster</h2>
    <${Loading} state=${st}
      >${(c) =>
        html` <p>
            Leader: <code id="leader">${c.instances?.find((i) => i.leader)?.id ?? 'none yet'}</code> · this
            instance: <code>${c.self ?? '—'}</code>
          </p>
          <${Records} rows=${c.instances ?? []} id="instances" />`}<//
    >
  </section>`;
}
