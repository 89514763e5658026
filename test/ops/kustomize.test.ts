import { execFileSync, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type FairgateConfig, parseConfigText } from '@fairgate/config';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { ConfigMap, Namespace, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { describeWithTools } from '../support/required-tools.js';

/**
 * deploy/: renders the base and every overlay with `kubectl kustomize` (offline), validates
 * every object against the Kubernetes schemas (kubernetes-models; the ServiceMonitor and the
 * ScaledObject against the Prometheus Operator's and KEDA's CRD schemas) and checks that the
 * pieces fit: the gateway config in the ConfigMap parses with the gateway's own parser once
 * the Deployment's env (the Secret's values) is applied, the grace period covers preStop
 * plus the drain, probes, selectors, the HPA's target and the PDB all point at the gateway's
 * pods, its ServiceAccount may watch EndpointSlices and nothing else, and KEDA scales the
 * vLLM Deployment from the signal of the config's pool.
 */

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
const deployDir = join(repoRoot, 'deploy');

/** A rendered manifest: untyped JSON (test files may use `any`, biome.json). */
type Obj = Record<string, any>;

interface Validator {
  validate(): void;
}
// The constructors take the object's data without apiVersion/kind in their types; the
// rendered objects carry both, which the models accept.
type ModelClass = new (data: never) => Validator;

/** apiVersion/kind -> schema model. An object of any other kind fails the test. */
const MODELS: Record<string, ModelClass> = {
  'v1/Namespace': Namespace,
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
  'apps/v1/Deployment': Deployment,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
};

const GATEWAY = 'fairgate';

function kubectlAvailable(): boolean {
  const probe = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' });
  return probe.status === 0;
}

/** deploy/base and every directory under deploy/overlays. */
function kustomizations(): string[] {
  const overlays = readdirSync(join(deployDir, 'overlays'), { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => `overlays/${entry.name}`)
    .sort();
  return ['base', ...overlays];
}

function render(dir: string): Obj[] {
  const text = execFileSync('kubectl', ['kustomize', join(deployDir, dir)], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return parseAllDocuments(text).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`${dir}: ${doc.errors[0]?.message}`);
    return doc.toJS() as Obj;
  });
}

const idOf = (obj: Obj) => `${obj.kind}/${obj.metadata?.name}`;

function find(objs: Obj[], kind: string, name: string): Obj {
  const found = objs.filter((o) => o.kind === kind && o.metadata?.name === name);
  expect(found, `${kind}/${name}`).toHaveLength(1);
  return found[0]!;
}

/** A label selector's matchLabels all hold in `labels` (and it selects something). */
function selects(matchLabels: Record<string, string> | undefined, labels: Obj): boolean {
  const pairs = Object.entries(matchLabels ?? {});
  return pairs.length > 0 && pairs.every(([key, value]) => labels[key] === value);
}

/**
 * kustomize folds long base64 Secret values over several lines; the API server's decoder
 * (Go's base64) skips the line breaks, the schema's "byte" format does not.
 */
function forValidation(obj: Obj): Obj {
  if (obj.kind !== 'Secret' || !obj.data) return obj;
  const data = Object.fromEntries(
    Object.entries(obj.data).map(([key, value]) => [key, String(value).replace(/[\r\n]/g, '')]),
  );
  return { ...obj, data };
}

function secretValue(secret: Obj, key: string): string | undefined {
  if (secret.stringData?.[key] !== undefined) return String(secret.stringData[key]);
  const data = secret.data?.[key];
  return data === undefined ? undefined : Buffer.from(String(data), 'base64').toString('utf8');
}

/** The container's env as the kubelet would set it; a dangling reference fails. */
function containerEnv(objs: Obj[], container: Obj): Record<string, string> {
  const env: Record<string, string> = {};
  for (const entry of container.env ?? []) {
    if (entry.value !== undefined) {
      env[entry.name] = String(entry.value);
      continue;
    }
    const ref = entry.valueFrom?.secretKeyRef;
    if (!ref) throw new Error(`env ${entry.name}: only value and secretKeyRef are expected`);
    const value = secretValue(find(objs, 'Secret', ref.name), ref.key);
    if (value === undefined) {
      if (ref.optional) continue;
      throw new Error(`env ${entry.name}: Secret ${ref.name} has no key '${ref.key}'`);
    }
    env[entry.name] = value;
  }
  return env;
}

/** A named or numbered container port -> its number. */
function portNumber(container: Obj, port: string | number): number | undefined {
  if (typeof port === 'number') return port;
  return container.ports?.find((p: Obj) => p.name === port)?.containerPort;
}

/** Seconds a preStop hook holds the container before SIGTERM (sleep action or `sleep N`). */
function preStopSeconds(container: Obj): number {
  const preStop = container.lifecycle?.preStop;
  if (!preStop) return 0;
  if (preStop.sleep) return Number(preStop.sleep.seconds);
  const command: string[] = preStop.exec?.command ?? [];
  const sleep = command.join(' ').match(/\bsleep\s+(\d+)/);
  if (sleep) return Number(sleep[1]);
  throw new Error(`preStop ${JSON.stringify(preStop)}: cannot tell how long it holds`);
}

/** `shutdown.drain_timeout_s` is written in the file, not left to the default. */
function drainIsExplicit(configText: string): boolean {
  const doc = parseAllDocuments(configText)[0]?.toJS() as Obj | undefined;
  return typeof doc?.shutdown?.drain_timeout_s === 'number';
}

interface Gateway {
  deployment: Obj;
  podLabels: Obj;
  container: Obj;
  configText: string;
  config: FairgateConfig;
  env: Record<string, string>;
}

function gatewayOf(objs: Obj[]): Gateway {
  const deployment = find(objs, 'Deployment', GATEWAY);
  const pod = deployment.spec.template;
  const container = pod.spec.containers.find((c: Obj) => c.name === 'gateway');
  expect(container, 'container gateway').toBeDefined();
  // args, not command: the image's entrypoint (tini, PID 1) must stay in place.
  expect(container.command, 'gateway container keeps the image entrypoint').toBeUndefined();
  const args: string[] = container.args ?? [];
  const configPath = args[args.indexOf('--config') + 1];
  expect(args.includes('--config') && configPath, 'fairgate --config <file>').toBeTruthy();
  // The config file is a key of a ConfigMap mounted as a directory (a subPath mount would
  // never see updates, and the gateway hot-reloads the file).
  const mount = container.volumeMounts.find((m: Obj) => configPath!.startsWith(`${m.mountPath}/`));
  expect(mount, `a volume mounted above ${configPath}`).toBeDefined();
  expect(mount.subPath, 'config mounted without subPath').toBeUndefined();
  const volume = pod.spec.volumes.find((v: Obj) => v.name === mount.name);
  const configMap = find(objs, 'ConfigMap', volume.configMap?.name);
  const key = configPath!.slice(mount.mountPath.length + 1);
  const configText = configMap.data?.[key];
  expect(typeof configText, `ConfigMap ${configMap.metadata.name} key ${key}`).toBe('string');
  const env = containerEnv(objs, container);
  const config = parseConfigText(configText, { source: `ConfigMap ${key}`, env });
  return { deployment, podLabels: pod.metadata.labels, container, configText, config, env };
}

it('the schema validators reject a broken object (they are live)', () => {
  const broken = { metadata: { name: 'x' }, spec: { replicas: 'two', template: {} } };
  expect(() => new Deployment(broken as never).validate()).toThrow(/replicas|selector/);
});

describeWithTools(
  'deploy/ rendered with kubectl kustomize',
  { kubectl: kubectlAvailable() ? 'kubectl' : undefined },
  'install kubectl >= 1.27, it bundles kustomize; .ci/run installs it',
  () => {
    for (const dir of kustomizations()) {
      describe(dir, () => {
        // Rendered on first use, so a kustomization that fails to build fails its own tests
        // (with kubectl's message) and not the collection of the whole file.
        let rendered: { objs: Obj[]; gateway?: Gateway } | undefined;
        const load = () => {
          rendered ??= { objs: render(dir) };
          return rendered;
        };
        const objects = () => load().objs;
        const gateway = () => {
          const state = load();
          state.gateway ??= gatewayOf(state.objs);
          return state.gateway;
        };

        it('every object validates against its Kubernetes schema', () => {
          const objs = objects();
          expect(objs.length).toBeGreaterThan(0);
          const failures: string[] = [];
          for (const obj of objs) {
            const Model = MODELS[`${obj.apiVersion}/${obj.kind}`];
            if (!Model) {
              failures.push(`${idOf(obj)}: no validator for ${obj.apiVersion} ${obj.kind}`);
              continue;
            }
            try {
              new Model(forValidation(obj) as never).validate();
            } catch (error) {
              failures.push(`${idOf(obj)}: ${(error as Error).message}`);
            }
          }
          expect(failures).toEqual([]);
          const ids = objs.map((o) => `${o.apiVersion}/${idOf(o)}`);
          expect(new Set(ids).size, 'no duplicate objects').toBe(ids.length);
        });

        it("the ConfigMap's gateway config parses with the Deployment's env and Secret", () => {
          const { config, env } = gateway();
          expect(config.tenants.length).toBeGreaterThan(0);
          for (const pool of config.pools) {
            expect(pool.pods.length > 0 || pool.discovery, `pool ${pool.name}: pods`).toBeTruthy();
          }
          // Many replicas need the shared scheduler: Redis is configured, its URL (when one
          // is used rather than Sentinel or Cluster seeds) from the Secret.
          expect(config.redis, 'redis configured').toBeTruthy();
          if (config.redis?.url !== undefined) {
            expect(env.FAIRGATE__REDIS__URL, 'redis.url from the Secret').toBe(config.redis.url);
          }
          expect(config.admin.token_sha256).toMatch(/^[0-9a-f]{64}$/);
        });

        it('tenant digests from the Secret land on the tenant their key names', () => {
          const { container, config } = gateway();
          const tenantEnv = /^FAIRGATE__TENANTS__(\d+)__API_KEY_SHA256__(\d+)$/;
          let seen = 0;
          for (const entry of container.env) {
            const match = tenantEnv.exec(entry.name);
            if (!match) continue;
            seen++;
            const index = Number(match[1]);
            const tenant = config.tenants[index];
            expect(tenant, `${entry.name}: no tenant at index ${index}`).toBeDefined();
            expect(entry.valueFrom.secretKeyRef.key, entry.name).toBe(
              `tenant-${index}-${tenant!.id}-key-${match[2]}-sha256`,
            );
          }
          expect(seen).toBeGreaterThanOrEqual(config.tenants.length);
        });

        it('the grace period covers the preStop sleep and the whole drain', () => {
          const { deployment, container, config, configText } = gateway();
          const drain = config.shutdown.drain_timeout_s;
          expect(drainIsExplicit(configText), 'drain set in the ConfigMap').toBe(true);
          const grace = deployment.spec.template.spec.terminationGracePeriodSeconds;
          expect(grace).toBeTypeOf('number');
          expect(grace).toBeGreaterThan(drain);
          expect(grace).toBeGreaterThan(preStopSeconds(container) + drain);
        });

        it('probes: readiness /readyz, liveness /healthz, on the port the config listens on', () => {
          const { container, config } = gateway();
          const http = container.ports.find((p: Obj) => p.name === 'http');
          expect(http?.containerPort).toBe(config.listen.port);
          expect(container.readinessProbe?.httpGet?.path).toBe('/readyz');
          expect(container.livenessProbe?.httpGet?.path).toBe('/healthz');
          const probes = [
            container.readinessProbe,
            container.livenessProbe,
            container.startupProbe,
          ];
          for (const probe of probes.filter(Boolean)) {
            expect(portNumber(container, probe.httpGet.port)).toBe(config.listen.port);
          }
          if (container.startupProbe) expect(container.startupProbe.httpGet.path).toBe('/healthz');
        });

        it('the Service selects the gateway pods, and only them, on port http 8080', () => {
          const objs = objects();
          const { podLabels, container } = gateway();
          const service = find(objs, 'Service', GATEWAY);
          expect(selects(service.spec.selector, podLabels)).toBe(true);
          for (const other of objs.filter(
            (o) => o.kind === 'Deployment' && o.metadata.name !== GATEWAY,
          )) {
            expect(
              selects(service.spec.selector, other.spec.template.metadata.labels),
              idOf(other),
            ).toBe(false);
          }
          const port = service.spec.ports.find((p: Obj) => p.name === 'http');
          expect(port?.port).toBe(8080);
          expect(portNumber(container, port.targetPort)).toBe(8080);
        });

        it('the Deployment selects its own pods and spreads them over zones and nodes', () => {
          const { deployment, podLabels } = gateway();
          expect(selects(deployment.spec.selector.matchLabels, podLabels)).toBe(true);
          const spread: Obj[] = deployment.spec.template.spec.topologySpreadConstraints ?? [];
          const keys = spread.map((c) => c.topologyKey);
          expect(new Set(keys).size, 'one constraint per topology key').toBe(keys.length);
          expect(keys).toEqual(
            expect.arrayContaining(['topology.kubernetes.io/zone', 'kubernetes.io/hostname']),
          );
          for (const constraint of spread) {
            expect(selects(constraint.labelSelector?.matchLabels, podLabels)).toBe(true);
          }
          expect(deployment.spec.strategy.rollingUpdate.maxUnavailable).toBe(0);
        });

        it('the HPA targets the gateway Deployment, which then leaves replicas to it', () => {
          const objs = objects();
          const { deployment } = gateway();
          const hpas = objs.filter((o) => o.kind === 'HorizontalPodAutoscaler');
          if (hpas.length === 0) {
            // Without an autoscaler the Deployment sets its count: at least two replicas.
            expect(deployment.spec.replicas).toBeGreaterThanOrEqual(2);
            return;
          }
          expect(hpas).toHaveLength(1);
          const hpa = hpas[0]!;
          expect(hpa.spec.scaleTargetRef).toEqual({
            apiVersion: 'apps/v1',
            kind: 'Deployment',
            name: deployment.metadata.name,
          });
          expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
          expect(hpa.spec.maxReplicas).toBeGreaterThan(hpa.spec.minReplicas);
          const cpu = hpa.spec.metrics.find((m: Obj) => m.resource?.name === 'cpu');
          expect(cpu?.resource.target.type).toBe('Utilization');
          // Utilization is relative to the request: the container must have one.
          expect(gateway().container.resources?.requests?.cpu).toBeDefined();
          expect(deployment.spec.replicas, 'no replicas next to an HPA').toBeUndefined();
        });

        it('the PDB selects the gateway pods and allows one disruption at a time', () => {
          const objs = objects();
          const { podLabels } = gateway();
          const pdb = find(objs, 'PodDisruptionBudget', GATEWAY);
          expect(selects(pdb.spec.selector.matchLabels, podLabels)).toBe(true);
          const budget = pdb.spec.maxUnavailable ?? pdb.spec.minAvailable;
          expect(budget, 'maxUnavailable or minAvailable').toBeDefined();
          if (pdb.spec.maxUnavailable !== undefined) expect(pdb.spec.maxUnavailable).toBe(1);
        });

        it('the gateway may watch EndpointSlices in its namespace, and do nothing else', () => {
          const objs = objects();
          const { deployment, config } = gateway();
          const pod = deployment.spec.template.spec;
          const account = find(objs, 'ServiceAccount', pod.serviceAccountName);
          const namespace = deployment.metadata.namespace;
          expect(account.metadata.namespace).toBe(namespace);
          // Kubernetes discovery reads the API server with the account's token.
          if (config.pools.some((pool) => pool.discovery?.kubernetes)) {
            expect(pod.automountServiceAccountToken, 'token mounted').not.toBe(false);
            const ownNamespace = config.pools.every(
              (pool) => (pool.discovery?.kubernetes?.namespace ?? namespace) === namespace,
            );
            expect(ownNamespace, 'the discovered Services are in the Role namespace').toBe(true);
          }
          expect(objs.filter((o) => /^Cluster/.test(o.kind)).map(idOf)).toEqual([]);
          const bindings = objs.filter(
            (o) =>
              o.kind === 'RoleBinding' &&
              o.subjects?.some(
                (s: Obj) =>
                  s.kind === 'ServiceAccount' &&
                  s.name === account.metadata.name &&
                  (s.namespace ?? o.metadata.namespace) === namespace,
              ),
          );
          expect(bindings.map(idOf)).toHaveLength(1);
          const binding = bindings[0]!;
          expect(binding.metadata.namespace).toBe(namespace);
          expect(binding.roleRef).toEqual({
            apiGroup: 'rbac.authorization.k8s.io',
            kind: 'Role',
            name: expect.any(String),
          });
          const role = find(objs, 'Role', binding.roleRef.name);
          expect(role.metadata.namespace).toBe(namespace);
          expect(
            role.rules.map((rule: Obj) => ({ ...rule, verbs: [...rule.verbs].sort() })),
          ).toEqual([
            {
              apiGroups: ['discovery.k8s.io'],
              resources: ['endpointslices'],
              verbs: ['get', 'list', 'watch'],
            },
          ]);
        });

        it('KEDA scales the vLLM Deployment to fairgate_desired_pods of the pool', () => {
          const objs = objects();
          const { deployment, config } = gateway();
          const scaled = objs.filter((o) => o.kind === 'ScaledObject');
          if (dir === 'overlays/production') expect(scaled).toHaveLength(1);
          const readme = readFileSync(join(deployDir, 'README.md'), 'utf8');
          for (const object of scaled) {
            const spec = object.spec;
            // The pods it adds are the ones the gateway discovers.
            expect(config.pools.some((pool) => pool.discovery?.kubernetes)).toBe(true);
            const target = spec.scaleTargetRef;
            expect(target.kind ?? 'Deployment').toBe('Deployment');
            expect(target.apiVersion ?? 'apps/v1').toBe('apps/v1');
            expect(target.name).not.toBe(deployment.metadata.name);
            // A Deployment of this render, or the one deploy/README.md says to bring.
            const rendered = objs.some(
              (o) => o.kind === 'Deployment' && o.metadata.name === target.name,
            );
            if (!rendered) expect(readme).toContain(`Deployment \`${target.name}\``);
            const hpas = objs.filter((o) => o.kind === 'HorizontalPodAutoscaler');
            expect(hpas.map((h) => h.spec.scaleTargetRef.name)).not.toContain(target.name);

            expect(spec.triggers).toHaveLength(1);
            const trigger = spec.triggers[0];
            expect(trigger.type).toBe('prometheus');
            const query: string = trigger.metadata.query;
            const selector = /\bfairgate_desired_pods\{([^}]*)\}/.exec(query);
            expect(selector, query).not.toBeNull();
            expect(selector![1]).toContain(`pool="${config.pool}"`);
            const namespaceLabel = /\bnamespace="([^"]*)"/.exec(selector![1]!);
            if (namespaceLabel) expect(namespaceLabel[1]).toBe(deployment.metadata.namespace);
            // replicas = the signal: AverageValue over a threshold of 1. A missing series is
            // an error (the count holds), not a 0 (the minimum).
            expect(trigger.metricType).toBe('AverageValue');
            expect(trigger.metadata.threshold).toBe('1');
            expect(trigger.metadata.ignoreNullValues).toBe('false');

            expect(spec.minReplicaCount).toBeGreaterThanOrEqual(1);
            expect(spec.maxReplicaCount).toBeGreaterThan(spec.minReplicaCount);
            const scaleDown = spec.advanced?.horizontalPodAutoscalerConfig?.behavior?.scaleDown;
            expect(scaleDown?.stabilizationWindowSeconds).toBeGreaterThanOrEqual(60);
          }
        });

        it('the ServiceMonitor, where present, scrapes /metrics on the Service port', () => {
          const objs = objects();
          const monitors = objs.filter((o) => o.kind === 'ServiceMonitor');
          const service = find(objs, 'Service', GATEWAY);
          for (const monitor of monitors) {
            expect(selects(monitor.spec.selector.matchLabels, service.metadata.labels)).toBe(true);
            for (const endpoint of monitor.spec.endpoints) {
              expect(endpoint.path).toBe('/metrics');
              expect(service.spec.ports.map((p: Obj) => p.name)).toContain(endpoint.port);
            }
          }
          if (dir !== 'overlays/dev') expect(monitors).toHaveLength(1);
        });

        it('every workload runs as non-root with a read-only root filesystem', () => {
          const objs = objects();
          for (const workload of objs.filter((o) => o.kind === 'Deployment')) {
            const pod = workload.spec.template.spec;
            expect(pod.securityContext?.runAsNonRoot, idOf(workload)).toBe(true);
            for (const container of pod.containers) {
              const where = `${idOf(workload)} ${container.name}`;
              expect(container.securityContext?.readOnlyRootFilesystem, where).toBe(true);
              expect(container.securityContext?.allowPrivilegeEscalation, where).toBe(false);
              expect(container.resources?.requests, where).toBeDefined();
              expect(container.resources?.limits?.memory, where).toBeDefined();
            }
          }
        });

        it('in-namespace hosts in the config (pods, Redis) are Services of this render', () => {
          const objs = objects();
          const { config } = gateway();
          const urls = [...config.pods.map((p) => p.url), config.redis?.url].filter(
            (u): u is string => u !== undefined,
          );
          for (const url of urls) {
            const { hostname, port, protocol } = new URL(url);
            if (hostname.includes('.')) continue; // another namespace or outside the cluster
            const service = find(objs, 'Service', hostname);
            const ports = service.spec.ports.map((p: Obj) => p.port);
            const defaultPort = { 'http:': 80, 'https:': 443 }[protocol] ?? 6379;
            expect(ports, url).toContain(port ? Number(port) : defaultPort);
          }
        });
      });
    }
  },
);
