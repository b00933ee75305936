/**
 * The sidebar with 200 clusters, in Chromium, in a real JupyterLab (started
 * by bench/bench_sidebar.py). Messages go through the same path as the
 * server's event stream (`ClusterListModel.handleMessages`, JSON text in),
 * and each measure ends when the DOM is committed and laid out.
 *
 * - first render: a snapshot of 200 clusters into an empty list
 * - update: one `modified` event (a cluster changing phase) among 200
 *
 * Writes the samples (ms) as JSON to RAYLAB_BENCH_OUT.
 */
import * as fs from 'fs';

import { expect, test } from '@jupyterlab/galata';

const CLUSTERS = 200;
const FIRST_RENDER_ROUNDS = 12;
const UPDATE_ROUNDS = 60;
// Updates before measuring: the first ones pay for JIT compilation and the
// garbage the first renders left, as any sidebar does once after loading.
const WARMUP_UPDATES = 5;

test('render 200 cluster cards, then apply single updates', async ({
  page
}) => {
  test.setTimeout(240_000);
  await page.locator('.jp-SideBar [data-id="raylab-clusters"]').click();
  await expect(page.locator('#raylab-clusters .jp-raylab-empty')).toBeVisible();

  const samples = await page.evaluate(
    async ({ n, firstRounds, updateRounds, warmup }) => {
      interface ISidebar {
        id: string;
        node: HTMLElement;
        model: {
          handleMessages(m: { event: string; data: string }[]): void;
        };
      }
      const app = (
        window as unknown as {
          jupyterapp: { shell: { widgets(a: string): Iterable<unknown> } };
        }
      ).jupyterapp;
      const sidebar = [...app.shell.widgets('left')].find(
        w => (w as ISidebar).id === 'raylab-clusters'
      ) as ISidebar;
      const root = sidebar.node;
      const now = Date.now() / 1000;
      const phases = ['Ready', 'Starting', 'Pending', 'Degraded', 'Suspended'];
      const cluster = (i: number, phase: string, ready: number): object => ({
        name: `bench-${String(i).padStart(3, '0')}`,
        owner: 'bench',
        backend: 'local',
        phase,
        reason:
          phase === 'Pending'
            ? '0/3 nodes are available: 3 Insufficient nvidia.com/gpu'
            : '',
        head_ready: phase !== 'Pending',
        workers_ready: ready,
        workers_desired: 2,
        created: now - i * 37,
        endpoints: {
          client: 'ray://127.0.0.1:10001',
          dashboard: 'http://127.0.0.1:8265'
        },
        namespace: null,
        ray_version: '2.60.0',
        python_version: '3.11',
        logical_gpus: true,
        environment: null,
        spec: {
          name: `bench-${String(i).padStart(3, '0')}`,
          gpus: 4,
          gpu_type: 'a100',
          workers: 2,
          cpus: '12',
          memory: '96Gi',
          image: null,
          min_workers: null,
          max_workers: null,
          idle_timeout_minutes: null
        },
        gpus: 4,
        gpu_type: 'a100'
      });
      const snapshot = (count: number): string =>
        JSON.stringify({
          type: 'SNAPSHOT',
          clusters: Array.from({ length: count }, (_, i) =>
            cluster(i, phases[i % phases.length], i % 3)
          ),
          available: true,
          error: null
        });
      const settle = (done: () => boolean): Promise<void> =>
        new Promise(resolve => {
          if (done()) {
            resolve();
            return;
          }
          const observer = new MutationObserver(() => {
            if (done()) {
              observer.disconnect();
              resolve();
            }
          });
          observer.observe(root, {
            subtree: true,
            childList: true,
            attributes: true,
            characterData: true
          });
        });
      const layout = (): void => {
        // Force style and layout now, so that the measure includes them.
        void root.getBoundingClientRect();
        void document.body.offsetHeight;
      };
      const frame = (): Promise<void> =>
        new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
      const cards = (): number =>
        root.querySelectorAll('li.jp-raylab-card').length;

      const empty = snapshot(0);
      const full = snapshot(n);
      const first: number[] = [];
      for (let round = 0; round < firstRounds; round++) {
        sidebar.model.handleMessages([{ event: 'snapshot', data: empty }]);
        await settle(() => cards() === 0);
        await frame();
        await frame();
        const t0 = performance.now();
        sidebar.model.handleMessages([{ event: 'snapshot', data: full }]);
        await settle(() => cards() === n);
        layout();
        first.push(performance.now() - t0);
      }

      const update: number[] = [];
      for (let round = -warmup; round < updateRounds; round++) {
        await frame();
        const i = ((round + warmup) * 7) % n;
        const card = root.querySelector(
          `li[data-cluster="bench-${String(i).padStart(3, '0')}"]`
        );
        // A phase change: the badge, its colour and the reason line change.
        const phase =
          card?.getAttribute('data-phase') === 'Failed' ? 'Ready' : 'Failed';
        const data = JSON.stringify({
          type: 'MODIFIED',
          cluster: cluster(i, phase, 1)
        });
        const t0 = performance.now();
        sidebar.model.handleMessages([{ event: 'modified', data }]);
        await settle(() => card?.getAttribute('data-phase') === phase);
        layout();
        if (round >= 0) {
          update.push(performance.now() - t0);
        }
      }
      sidebar.model.handleMessages([{ event: 'snapshot', data: empty }]);
      return { first, update, cards: n };
    },
    {
      n: CLUSTERS,
      firstRounds: FIRST_RENDER_ROUNDS,
      updateRounds: UPDATE_ROUNDS,
      warmup: WARMUP_UPDATES
    }
  );

  const out = process.env.RAYLAB_BENCH_OUT;
  if (out) {
    fs.writeFileSync(out, JSON.stringify(samples));
  }
  console.log(JSON.stringify(samples));
});
