// The capacity what-if: the running scaler config against a pasted one, over the store's trace.
import { h } from '/ui/vendor/preact.mjs';
import { useState } from '/ui/vendor/hooks.mjs';
import htm from '/ui/vendor/htm.mjs';
import { api } from '/ui/app.js';

const html = htm.bind(h);

const METRICS = [
  ['jobs', 'Jobs'],
  ['waitP50Ms', 'Wait p50 (ms)'],
  ['waitP95Ms', 'Wait p95 (ms)'],
  ['waitP99Ms', 'Wait p99 (ms)'],
  ['peakAgents', 'Peak agents'],
  ['spawns', 'Spawns'],
  ['capDelayedJobs', 'Cap-delayed jobs'],
  ['agentHours', 'Agent-hours'],
];

function diff(c, p) {
  if (c === undefined || p === undefined) return '';
  const d = Math.round((p - c) * 1000) / 1000;
  const pct = c !== 0 ? ` (${d >= 0 ? '+' : ''}${Math.round((d / c) * 100)}%)` : '';
  return `${d > 0 ? '+' : ''}${d}${pct}`;
}

function Comparison({ r }) {
  const keys = [
    ...new Set([...r.proposed.pools.map((p) => p.key), ...(r.current?.pools.map((p) => p.key) ?? [])]),
  ].sort();
  const find = (rep, key) => rep?.pools.find((p) => p.key === key);
  const rows = [];
  for (const key of keys) {
    const p = find(r.proposed, key);
    const c = find(r.current, key);
    if (!(p?.jobs || p?.spawns || c?.jobs || c?.spawns)) continue;
    for (const [field, label] of METRICS) {
      rows.push(
        html`<tr data-pool=${key} data-metric=${field}>
          <td><code>${key}</code></td>
          <td>${label}</td>
          ${r.current ? html`<td class="num">${c?.[field] ?? '—'}</td>` : null}
          <td class="num">${p?.[field] ?? '—'}</td>
          ${r.current ? html`<td class="num">${diff(c?.[field], p?.[field])}</td>` : null}
        </tr>`,
      );
    }
  }
  return html`<table id="what-if">
    <tr>
      <th>Label set</th>
      <th>Metric</th>
      ${r.current ? html`<th>Current</th>` : null}
      <th>Proposed</th>
      ${r.current ? html`<th>Difference</th>` : null}
    </tr>
    ${rows}
  </table>`;
}

export function Capacity() {
  const [yaml, setYaml] = useState('');
  const [since, setSince] = useState('7d');
  const [busy, setBusy] = useState(false);
  const [problems, setProblems] = useState([]);
  const [result, setResult] = useState(undefined);
  const run = async (e) => {
    e.preventDefault();
    setBusy(true);
    setProblems([]);
    try {
      const r = await api('/api/v1/scaler/simulate', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ proposed: yaml, since }),
      });
      setResult(r);
    } catch (err) {
      setProblems(String(err.message ?? err).split('; '));
    } finally {
      setBusy(false);
    }
  };
  return html`<section>
    <h2>Capacity: what if?</h2>
    <p class="muted">
      Replays the jobs of the chosen window against the running scaler config and the one pasted here, on a
      virtual clock, through the scaler's own decisions. Nothing is changed. Admins only.
    </p>
    <form id="what-if-form" onSubmit=${run}>
      <label for="proposed">Proposed scaler config (YAML)</label>
      <textarea
        id="proposed"
        rows="14"
        spellcheck="false"
        value=${yaml}
        onInput=${(e) => setYaml(e.currentTarget.value)}
      ></textarea>
      <label for="since">Trace of the last</label>
      <input id="since" value=${since} size="6" onInput=${(e) => setSince(e.currentTarget.value)} />
      <button type="submit" disabled=${busy}>${busy ? 'Simulating…' : 'Run what-if'}</button>
    </form>
    ${
      problems.length
        ? html`<ul class="error" role="alert" id="what-if-problems">
            ${problems.map((p) => html`<li>${p}</li>`)}
          </ul>`
        : null
    }
    ${
      result
        ? html`<section id="what-if-result">
            <p>
              ${result.jobs} job(s) of the last ${result.since} replayed.
              ${result.current ? '' : ' No scaler is running here: only the proposed config is shown.'}
            </p>
            <${Comparison} r=${result} />
            <h3>Queue wait and agents over time</h3>
            <img
              id="what-if-chart"
              alt="queue wait and agents over time, current and proposed"
              src=${`data:image/svg+xml;charset=utf-8,${encodeURIComponent(result.svg)}`}
            />
          </section>`
        : null
    }
  </section>`;
}
