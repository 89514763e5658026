import { readFileSync, writeFileSync } from 'node:fs';
import { TEST_KEYS } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { batchInput, sdk, submitBatch, waitForBatch } from '../support/batch.js';
import {
  DASHBOARD_JSON,
  eventually,
  findPrometheus,
  OPS_TARGET_S,
  PROMETHEUS_YML,
  type PromAlert,
  type PrometheusHandle,
  promtool,
  RULES_TEST_YML,
  RULES_YML,
  readDashboard,
  runOpsLoad,
  startOpsPool,
  startPrometheus,
  substituteVariables,
} from '../support/ops-stack.js';
import type { Pool } from '../support/pool.js';
import { describeWithTools } from '../support/required-tools.js';

/**
 * Every query of infra/grafana/dashboards/fairgate.json and every rule of
 * infra/fairgate.rules.yml, on a real Prometheus scraping a real pool (Redis, two sims, two
 * gateway replicas) under a load that drops a protected class. The alerts that the load
 * provokes fire (protected drops; critical's p99 above its 5 ms target), the others stay
 * silent; then the no-leader alert fires when nobody can lead (a foreign holder of the
 * leader lease: every replica's renewal and acquire are refused), and the floor alert when a
 * hot reload pins the controller's cap at its floor.
 */
const tools = findPrometheus();

/** Alerts this load must fire, and the labels they must name. */
const PROVOKED = ['FairgateProtectedDrops', 'FairgateTtftSloBurn'];
/** Alerts made to fire after the load: nobody can lead; the controller's floor is its ceiling. */
const PROVOKED_LATER = ['FairgateNoLeader', 'FairgateBudgetAtFloor'];
/** Alerts whose conditions do not hold under this load. */
const SILENT = [
  ...PROVOKED_LATER,
  'FairgateSeveralLeaders',
  'FairgateRedisErrors',
  'FairgateRedisOutage',
  'FairgatePodUnhealthy',
  'FairgatePodScrapeFailing',
  'FairgateDiscoveryFailing',
  'FairgateTunerRejecting',
  'FairgateGatewayDown',
];
/**
 * Alerts whose condition follows the host, not the gateway: this test shares two cores with
 * other test files, so a replica's event loop may run 0.1 s late for a moment. Its `for: 5m`
 * keeps it from firing here (asserted); its threshold and labels are pinned by
 * infra/fairgate.rules.test.yml (promtool test rules).
 */
const HOST_DEPENDENT = ['FairgateReplicaEventLoopLag'];

interface RuleFile {
  groups: Array<{
    name: string;
    rules: Array<{
      alert?: string;
      record?: string;
      expr: string;
      for?: string;
      labels?: Record<string, string>;
      annotations?: Record<string, string>;
    }>;
  }>;
}

const ruleFile = parse(readFileSync(RULES_YML, 'utf8')) as RuleFile;
const allRules = ruleFile.groups.flatMap((g) => g.rules);
const alertRules = allRules.filter((r) => r.alert !== undefined);

describeWithTools(
  'prometheus: dashboard and alert rules',
  { prometheus: tools?.prometheus, promtool: tools?.promtool },
  'apt-get install -y prometheus; .ci/run installs it',
  () => {
    it('promtool accepts infra/prometheus.yml and infra/fairgate.rules.yml and passes its unit tests; every alert has for, severity and summary', async () => {
      const bins = tools!;
      const config = await promtool(bins.promtool, ['check', 'config', PROMETHEUS_YML]);
      expect(config).toContain('SUCCESS');
      const rules = await promtool(bins.promtool, ['check', 'rules', RULES_YML]);
      expect(rules).toContain(`SUCCESS: ${allRules.length} rules found`);
      // The rules' own unit tests on synthetic series (thresholds, labels, `for`).
      const unit = await promtool(bins.promtool, ['test', 'rules', RULES_TEST_YML]);
      expect(unit).toContain('SUCCESS');
      for (const rule of alertRules) {
        expect(rule.for, `${rule.alert}: for`).toMatch(/^\d+[smh]$/);
        expect(['critical', 'warning'], `${rule.alert}: severity`).toContain(rule.labels?.severity);
        expect(rule.annotations?.summary, `${rule.alert}: summary`).toBeTruthy();
      }
      // The test decides for every alert whether this load provokes it.
      expect(alertRules.map((r) => r.alert).sort()).toEqual(
        [...PROVOKED, ...SILENT, ...HOST_DEPENDENT].sort(),
      );
    });

    describe('on a real Prometheus', () => {
      let pool: Pool;
      let prom: PrometheusHandle;

      beforeAll(async () => {
        pool = await startOpsPool();
        prom = await startPrometheus(tools!.prometheus, {
          gateways: pool.gateways.map((g) => g.url),
          sims: pool.sims.map((s) => s.url),
          intervalS: 1,
          ruleFor: '2s',
        });
      }, 60_000);

      afterAll(async () => {
        await prom?.stop();
        await pool?.stop();
      });

      it('every dashboard query returns data, the provoked alerts fire, the others are silent; no leader and the floor fire', async () => {
        const started = performance.now();
        const log = (line: string) =>
          console.log(`[ops ${((performance.now() - started) / 1_000).toFixed(1)} s] ${line}`);
        // Prometheus scrapes every replica and sim (target discovery takes a moment).
        const targets =
          (await eventually(async () => {
            const t = await prom.targets();
            return t.length === 4 && t.every((x) => x.health === 'up') ? t : undefined;
          }, 10_000)) ?? (await prom.targets());
        expect(targets.map((t) => `${t.job} ${t.health}`).sort()).toEqual([
          'fairgate-gateway up',
          'fairgate-gateway up',
          'fairgate-sim up',
          'fairgate-sim up',
        ]);

        const loadSeconds = 24;
        const load = runOpsLoad({ gateways: () => pool.gateways, seconds: loadSeconds });
        // A small batch, so the Batch API panels have their series (docs/batch.md).
        const batch = await submitBatch(sdk(pool.gateways[0]!, TEST_KEYS.paying), batchInput(20));
        const loadEndsAt = Date.now() + loadSeconds * 1_000;

        // The slowest series: the tuner's sizing (a baseline period, a bootstrap, an update).
        const sized = await eventually(async () => {
          const r = await prom.query(
            'max(fairgate_desired_pods) and on () max(fairgate_tuner_nis)',
          );
          return r.length > 0 ? r : undefined;
        }, 30_000);
        log(`tuner sized: ${sized ? 'yes' : 'no'}`);
        expect(
          sized,
          'the tuner sized the pool (fairgate_desired_pods and fairgate_tuner_nis)',
        ).toBeDefined();

        // 1. Every dashboard expression, with its variables at All, returns data.
        const { panels, variables } = readDashboard(DASHBOARD_JSON);
        const everyTarget = panels.flatMap((p) => p.targets);
        expect(everyTarget.length).toBeGreaterThanOrEqual(panels.length);
        const empty: string[] = [];
        for (const target of everyTarget) {
          const expr = substituteVariables(target.expr, {
            pool: '.*',
            tenant: '.*',
            replica: '.*',
          });
          const remaining = Math.max(2_000, loadEndsAt - Date.now());
          const result = await eventually(async () => {
            const r = await prom.query(expr);
            return r.length > 0 ? r : undefined;
          }, remaining);
          if (!result) empty.push(`${target.panel} [${target.refId}]: ${expr}`);
        }
        log(`${everyTarget.length} dashboard queries of ${panels.length} panels evaluated`);
        expect(empty, 'dashboard queries without data').toEqual([]);

        // The template variables resolve, and filter.
        for (const variable of variables) {
          const m = /^label_values\(\s*([^,]+?)\s*,\s*([A-Za-z_]+)\s*\)$/.exec(variable.query);
          expect(m, `variable ${variable.name}: ${variable.query}`).not.toBeNull();
          const values = await prom.labelValues(m![2]!, m![1]!);
          expect(values.length, `variable ${variable.name} has values`).toBeGreaterThan(0);
        }
        expect(await prom.labelValues('tenant', 'fairgate_pool_offered_total')).toEqual([
          'extra',
          'free',
          'paying',
        ]);
        const dropsTarget = everyTarget.find((t) => t.expr.includes('fairgate_drops_total'))!;
        const freeDrops = await prom.query(
          substituteVariables(dropsTarget.expr, { pool: '.*', tenant: 'free', replica: '.*' }),
        );
        expect(freeDrops.length).toBeGreaterThan(0);
        expect(new Set(freeDrops.map((s) => s.metric.tenant))).toEqual(new Set(['free']));

        // 2. The provoked alerts fire; every rule evaluates without error.
        const firing = await eventually(async () => {
          const alerts = await prom.alerts();
          const names = new Set(
            alerts.filter((a) => a.state === 'firing').map((a) => a.labels.alertname),
          );
          return PROVOKED.every((n) => names.has(n)) ? alerts : undefined;
        }, 20_000);
        const alerts: PromAlert[] = firing ?? (await prom.alerts());
        log(`alerts: ${alerts.map((a) => `${a.labels.alertname}(${a.state})`).join(', ')}`);
        const byName = (name: string) => alerts.filter((a) => a.labels.alertname === name);
        const drops = byName('FairgateProtectedDrops');
        expect(drops.some((a) => a.state === 'firing')).toBe(true);
        // extra floods standard (protected) into its queue of 1; free's batch drops never alert.
        expect(
          drops.some((a) => a.labels.tenant === 'extra' && a.labels.class === 'standard'),
        ).toBe(true);
        expect(drops.filter((a) => a.labels.class === 'batch')).toEqual([]);
        expect(drops.every((a) => a.labels.severity === 'critical')).toBe(true);
        const burn = byName('FairgateTtftSloBurn');
        expect(burn.some((a) => a.state === 'firing')).toBe(true);
        // critical's target is 5 ms; standard's is the controller's 2 s, which it meets.
        expect(new Set(burn.map((a) => a.labels.class))).toEqual(new Set(['critical']));
        const silentButActive = alerts.filter((a) => SILENT.includes(a.labels.alertname ?? ''));
        expect(silentButActive, 'alerts that should be silent').toEqual([]);
        const hostFiring = alerts.filter(
          (a) => HOST_DEPENDENT.includes(a.labels.alertname ?? '') && a.state === 'firing',
        );
        expect(hostFiring, 'host-dependent alerts firing within their for:').toEqual([]);

        const rules = await prom.rules();
        expect(rules.length).toBe(allRules.length);
        for (const rule of rules) {
          expect({ rule: rule.name, health: rule.health, error: rule.lastError ?? '' }).toEqual({
            rule: rule.name,
            health: 'ok',
            error: '',
          });
        }
        for (const rule of allRules) {
          const result = await prom.query(rule.expr);
          const name = rule.alert ?? rule.record ?? '';
          if (rule.record)
            expect(result.length, `recording rule ${name} has data`).toBeGreaterThan(0);
          if (PROVOKED.includes(name)) expect(result.length, `${name} holds`).toBeGreaterThan(0);
          if (SILENT.includes(name)) expect(result, `${name} does not hold`).toEqual([]);
        }
        const target = await prom.query('max(fairgate_ttft_target_seconds{class="standard"})');
        expect(Number(target[0]?.value?.[1])).toBe(OPS_TARGET_S);

        const results = await load;
        const dropped = results.filter((r) => r.status === 429).length;
        log(`load: ${results.length} requests, ${dropped} dropped`);
        expect(results.filter((r) => r.status === 200).length, 'requests served').toBeGreaterThan(
          0,
        );
        expect(dropped, 'requests dropped (the provoked drops)').toBeGreaterThan(0);
        const ended = await waitForBatch(
          sdk(pool.gateways[1]!, TEST_KEYS.paying),
          batch.id,
          30_000,
        );
        log(`batch: ${ended.status}, ${JSON.stringify(ended.request_counts)}`);
        expect(ended.status).toBe('completed');
        expect(ended.request_counts).toEqual({ total: 20, completed: 20, failed: 0 });

        // 3. Nobody can lead: a foreign holder takes the lease key; the leader's renewal is
        // refused and every acquire answers "held".
        const { pool: poolName } = await pool.state();
        const leaderKey = `{fg:${poolName}}:leader`;
        const redis = new Redis(pool.redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
        try {
          await redis.connect();
          await redis.set(leaderKey, 'ops-test-maintenance', 'PX', 60_000);
          const noLeader = await eventually(async () => {
            const a = await prom.alerts();
            return a.some((x) => x.labels.alertname === 'FairgateNoLeader' && x.state === 'firing')
              ? a
              : undefined;
          }, 20_000);
          log(`no leader: ${noLeader ? 'FairgateNoLeader firing' : 'did not fire'}`);
          expect(noLeader, 'FairgateNoLeader fires').toBeDefined();
          expect((await prom.query('sum(fairgate_is_leader)'))[0]?.value?.[1]).toBe('0');
          await redis.del(leaderKey);
        } finally {
          redis.disconnect();
        }
        // A replica leads again once the key is gone.
        const back = await eventually(async () => {
          const state = await pool.state();
          return state.leader && state.leader !== 'ops-test-maintenance' ? state.leader : undefined;
        }, 10_000);
        expect(back).toMatch(/^replica-/);

        // 4. The controller pinned at its floor: a hot reload makes the floor its ceiling too.
        const config = parse(readFileSync(pool.configPath, 'utf8')) as {
          controller: Record<string, number>;
        };
        const floor = config.controller.cap_per_worker_min!;
        config.controller.cap_per_worker = floor;
        config.controller.cap_per_worker_max = floor;
        writeFileSync(pool.configPath, stringify(config));
        const pinned = await eventually(async () => {
          const a = await prom.alerts();
          return a.find(
            (x) => x.labels.alertname === 'FairgateBudgetAtFloor' && x.state === 'firing',
          );
        }, 20_000);
        log(
          `floor: ${pinned ? `FairgateBudgetAtFloor firing at ${pinned.value}` : 'did not fire'}`,
        );
        expect(pinned, 'FairgateBudgetAtFloor fires').toBeDefined();
        expect(Number(pinned!.value)).toBe(floor);
      }, 150_000);
    });
  },
);
