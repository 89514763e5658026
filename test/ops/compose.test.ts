import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, posix, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { apiKeyDigest, type FairgateConfig, parseConfigText } from '@fairgate/config';
import { findExecutable } from '@fairgate/testkit';
import { expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { describeWithTools, requireTool, skipWithout } from '../support/required-tools.js';

/**
 * Static checks of docker-compose.yml and what it mounts (no container engine needed):
 * `docker-compose config` accepts it, the gateway scales behind the one balancer port, the
 * gateway config parses with fairgate's own parser and names the services the file runs,
 * and the balancer, Grafana and Prometheus configs agree with it.
 */

const root = fileURLToPath(new URL('../../', import.meta.url));
const run = promisify(execFile);

/** Development keys of the stack, as docs/deploy-compose.md documents them. */
const DEMO_KEYS: Record<string, string> = { paying: 'fg-dev-paying', free: 'fg-dev-free' };
const DEMO_ADMIN_TOKEN = 'fg-dev-admin';
const HOST_PORTS: Record<string, number[]> = {
  lb: [8080],
  jaeger: [16686],
  prometheus: [9090],
  grafana: [3000],
};

// ---- docker-compose config's output, in either the v1 (short) or v2 (long) syntax ----

interface Service {
  image?: string;
  build?: { context?: string } | string;
  command?: string[] | string;
  environment?: Record<string, string | number | boolean | null>;
  ports?: (string | { published?: string | number; target?: number; host_ip?: string })[];
  expose?: (string | number)[];
  volumes?: (string | { type?: string; source?: string; target?: string })[];
  container_name?: string;
  hostname?: string;
  stop_grace_period?: string;
}

interface Mount {
  source: string;
  target: string;
  bind: boolean;
}

function mountsOf(service: Service): Mount[] {
  return (service.volumes ?? []).map((volume) => {
    if (typeof volume !== 'string') {
      return {
        source: volume.source ?? '',
        target: volume.target ?? '',
        bind: volume.type === 'bind',
      };
    }
    const [source = '', target = ''] = volume.split(':');
    return { source, target, bind: source.startsWith('/') || source.startsWith('.') };
  });
}

function hostPortsOf(service: Service): { published: number; target: number }[] {
  return (service.ports ?? []).map((port) => {
    if (typeof port !== 'string') {
      return { published: Number(port.published), target: Number(port.target) };
    }
    const parts = port.replace(/\/\w+$/, '').split(':');
    const target = Number(parts.at(-1));
    return { published: parts.length > 1 ? Number(parts.at(-2)) : Number.NaN, target };
  });
}

function commandOf(service: Service): string[] {
  const command = service.command ?? [];
  return typeof command === 'string' ? command.split(/\s+/) : command;
}

/** The host file behind a path inside the container, through the service's bind mounts. */
function hostPathOf(service: Service, containerPath: string): string | undefined {
  for (const mount of mountsOf(service).filter((m) => m.bind)) {
    if (containerPath === mount.target) return mount.source;
    if (containerPath.startsWith(`${mount.target}/`)) {
      return join(mount.source, containerPath.slice(mount.target.length + 1));
    }
  }
  return undefined;
}

function durationSeconds(value: string | undefined): number {
  const match = /^(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$/.exec(value ?? '');
  if (!value || !match) return 10; // Docker's default stop timeout
  return Number(match[1] ?? 0) * 60 + Number(match[2] ?? 0);
}

function flagValue(command: string[], flag: string): string | undefined {
  const index = command.indexOf(flag);
  return index < 0 ? undefined : command[index + 1];
}

const composeBin = findExecutable('docker-compose');
const haproxyBin = findExecutable('haproxy');

describeWithTools(
  'docker-compose.yml',
  { 'docker-compose': composeBin },
  'apt-get install -y docker-compose; .ci/run installs it',
  () => {
    // Computed once, on first use: a test that needs the gateway config fails on its own
    // when the config is bad, and the others still run.
    let composed: Promise<Record<string, Service>> | undefined;
    let gateway: Promise<{ config: FairgateConfig; path: string }> | undefined;

    /** `docker-compose config`'s services: the file as Compose resolves it. */
    const composeServices = () => {
      composed ??= run(composeBin!, ['-f', 'docker-compose.yml', 'config'], {
        cwd: root,
        env: { ...process.env, COMPOSE_PROJECT_NAME: 'fairgate' },
      }).then(
        ({ stdout }) => (parseYaml(stdout) as { services: Record<string, Service> }).services,
        (error: { stderr?: string; message: string }) => {
          throw new Error(`docker-compose config failed: ${error.stderr || error.message}`);
        },
      );
      return composed;
    };

    /** The gateway's config file (through its mount), parsed with its env by fairgate's parser. */
    const gatewayConfigFile = () => {
      gateway ??= composeServices().then((services) => {
        const service = services.gateway!;
        const inContainer = flagValue(commandOf(service), '--config');
        if (!inContainer) throw new Error('the gateway command has no --config');
        const path = hostPathOf(service, inContainer);
        if (!path) throw new Error(`${inContainer} is not in a bind mount of the gateway`);
        const env = Object.fromEntries(
          Object.entries(service.environment ?? {}).map(([k, v]) => [k, String(v ?? '')]),
        );
        return { config: parseConfigText(readFileSync(path, 'utf8'), { source: path, env }), path };
      });
      return gateway;
    };

    it('is accepted by docker-compose config', async () => {
      await expect(composeServices()).resolves.toBeDefined();
    });

    it('runs the stack: redis, the pods, the gateways, the balancer, Jaeger, Prometheus, Grafana', async () => {
      const services = await composeServices();
      expect(Object.keys(services).sort()).toEqual(
        ['gateway', 'grafana', 'jaeger', 'lb', 'prometheus', 'redis', 'sim'].sort(),
      );
      // Two pods by default; `--scale sim=N` changes that with no config edit.
      expect((services.sim as { deploy?: { replicas?: number } }).deploy?.replicas).toBe(2);
    });

    it('publishes one port per UI and the balancer, and nothing else (the gateway scales)', async () => {
      const services = await composeServices();
      const published: Record<string, number[]> = {};
      for (const [name, service] of Object.entries(services)) {
        const ports = hostPortsOf(service).map((p) => p.published);
        if (ports.length > 0) published[name] = ports;
      }
      expect(published).toEqual(HOST_PORTS);
      expect(hostPortsOf(services.lb!)).toEqual([{ published: 8080, target: 8080 }]);
    });

    it('lets every gateway replica have its own hostname and so its own replica id', async () => {
      const services = await composeServices();
      const { config: gatewayConfig } = await gatewayConfigFile();
      const gateway = services.gateway!;
      expect(gateway.ports ?? []).toEqual([]);
      expect(gateway.container_name).toBeUndefined();
      expect(gateway.hostname).toBeUndefined();
      expect(flagValue(commandOf(gateway), '--replica-id')).toBeUndefined();
      expect((gateway.expose ?? []).map(String)).toContain(String(gatewayConfig.listen.port));
    });

    it('builds one image (the Dockerfile) for the pods and the gateways', async () => {
      const services = await composeServices();
      for (const name of ['gateway', 'sim']) {
        const service = services[name]!;
        expect(service.image, name).toBe('fairgate:dev');
        const context = typeof service.build === 'string' ? service.build : service.build?.context;
        expect(relative(root, context ?? '/nowhere'), name).toBe('');
      }
      const bins = (dir: string) =>
        Object.keys(
          (JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8')) as { bin: object })
            .bin,
        );
      expect(bins('apps/gateway')).toContain(commandOf(services.gateway!)[0]);
      expect(bins('apps/vllm-sim')).toContain(commandOf(services.sim!)[0]);
    });

    it('mounts only host paths that exist in the repository', async () => {
      const services = await composeServices();
      const missing: string[] = [];
      for (const [name, service] of Object.entries(services)) {
        for (const mount of mountsOf(service).filter((m) => m.bind)) {
          if (!mount.source.startsWith(root)) missing.push(`${name}: ${mount.source} outside`);
          else if (!existsSync(mount.source))
            missing.push(`${name}: ${relative(root, mount.source)}`);
        }
      }
      expect(missing).toEqual([]);
    });

    it("gives the gateways a config that fairgate's parser accepts, naming the stack's services", async () => {
      const services = await composeServices();
      const { config: gatewayConfig, path: gatewayConfigPath } = await gatewayConfigFile();
      expect(gatewayConfigPath.startsWith(join(root, 'infra/compose/'))).toBe(true);
      expect(gatewayConfig.listen.host).toBe('0.0.0.0');

      const redis = new URL(gatewayConfig.redis?.url ?? 'redis://none:0');
      expect(redis.hostname).toBe('redis');
      const redisConf = readFileSync(join(root, 'infra/redis.conf'), 'utf8');
      expect(/^port (\d+)$/m.exec(redisConf)?.[1]).toBe(redis.port || '6379');

      // The pods are discovered through Docker's DNS: the name is a service (one A record
      // per container, so it scales), and the service listens on all interfaces on the
      // discovered port, which the image's health check asks.
      expect(gatewayConfig.pods).toEqual([]);
      const dns = gatewayConfig.pools[0]?.discovery?.dns;
      expect(dns, 'discovery.dns').toBeDefined();
      expect(dns?.servers, 'Docker DNS from /etc/resolv.conf').toBeUndefined();
      const sim = services[dns?.name ?? ''];
      expect(sim, `discovery.dns.name ${dns?.name}: a service`).toBeDefined();
      const command = commandOf(sim!);
      expect(flagValue(command, '--port')).toBe(String(dns?.port));
      expect(flagValue(command, '--host')).toBe('0.0.0.0');
      const health = new URL(String(sim!.environment?.FAIRGATE_HEALTHCHECK_URL ?? ''));
      expect(health.port).toBe(String(dns?.port));
      expect((sim!.expose ?? []).map(String)).toContain(String(dns?.port));

      // Traces go to the jaeger service's OTLP/HTTP port (fairgate sets up no OpenTelemetry
      // metrics or logs: packages/telemetry/src/sdk.ts).
      const env = services.gateway!.environment ?? {};
      const otlp = new URL(String(env.OTEL_EXPORTER_OTLP_ENDPOINT ?? ''));
      expect(otlp.hostname).toBe('jaeger');
      expect(otlp.port).toBe('4318');
      expect((services.jaeger!.expose ?? []).map(String)).toContain('4318');
    });

    it('accepts the documented demo keys and admin token', async () => {
      const { config: gatewayConfig } = await gatewayConfigFile();
      for (const [tenant, key] of Object.entries(DEMO_KEYS)) {
        const config = gatewayConfig.tenants.find((t) => t.id === tenant);
        expect(config?.api_key_sha256, tenant).toContain(apiKeyDigest(key));
      }
      expect(gatewayConfig.admin.token_sha256).toBe(apiKeyDigest(DEMO_ADMIN_TOKEN));
      const docs = readFileSync(join(root, 'docs/deploy-compose.md'), 'utf8');
      for (const key of [...Object.values(DEMO_KEYS), DEMO_ADMIN_TOKEN])
        expect(docs).toContain(key);
      expect(docs).toContain('docker compose up --build --scale gateway=3');
    });

    it('gives a stopping gateway more time than its drain (shutdown.drain_timeout_s)', async () => {
      const services = await composeServices();
      const { config: gatewayConfig } = await gatewayConfigFile();
      const drainS =
        (gatewayConfig as { shutdown?: { drain_timeout_s?: number } }).shutdown?.drain_timeout_s ??
        0;
      // main.ts exits at the latest 1.8 s after the drain timeout; Docker then SIGKILLs.
      expect(durationSeconds(services.gateway!.stop_grace_period)).toBeGreaterThan(drainS + 1.8);
    });

    it('balances over the gateway service name on the port the gateways listen on', async () => {
      const services = await composeServices();
      const { config: gatewayConfig } = await gatewayConfigFile();
      const lb = services.lb!;
      const cfgPath = hostPathOf(lb, '/usr/local/etc/haproxy/haproxy.cfg');
      expect(cfgPath).toBeDefined();
      const cfg = readFileSync(cfgPath!, 'utf8');
      const templates = [...cfg.matchAll(/^\s*server-template\s+\S+\s+\S+\s+(\S+):(\d+)/gm)];
      expect(templates.length).toBeGreaterThan(0);
      for (const [, host, port] of templates) {
        expect(host).toBe('gateway');
        expect(Number(port)).toBe(gatewayConfig.listen.port);
      }
      const bind = /^\s*bind\s+\S*:(\d+)/m.exec(cfg);
      expect(Number(bind?.[1])).toBe(hostPortsOf(lb)[0]!.target);
      // Docker's embedded DNS, re-resolved: replicas added by --scale join without a reload.
      expect(cfg).toMatch(/nameserver\s+\S+\s+127\.0\.0\.11:53/);
      // SSE chunks leave at once; only requests that reached no pod are retried.
      expect(cfg).toMatch(/^\s*option http-no-delay/m);
      const retryOn = /^\s*retry-on\s+(.+)$/m.exec(cfg)?.[1]?.trim().split(/\s+/);
      expect(retryOn?.sort()).toEqual(['503', 'conn-failure']);
    });

    it.skipIf(skipWithout(haproxyBin))(
      'has a balancer config that haproxy -c accepts (needs haproxy: apt-get install -y haproxy)',
      async () => {
        const services = await composeServices();
        const cfgPath = hostPathOf(services.lb!, '/usr/local/etc/haproxy/haproxy.cfg')!;
        const { stdout, stderr } = await run(
          requireTool('haproxy', haproxyBin, 'apt-get install -y haproxy'),
          ['-c', '-f', cfgPath],
        ).catch((error: { stdout?: string; stderr?: string }) => {
          throw new Error(`haproxy -c failed:\n${error.stdout ?? ''}${error.stderr ?? ''}`);
        });
        expect(`${stdout}${stderr}`).toMatch(/Configuration file is valid/);
      },
    );

    it('provisions Grafana with the Prometheus service as the default datasource and the dashboards', async () => {
      const services = await composeServices();
      const grafana = services.grafana!;
      const datasourcesDir = hostPathOf(grafana, '/etc/grafana/provisioning/datasources');
      expect(datasourcesDir).toBeDefined();
      const datasources = readdirSync(datasourcesDir!)
        .filter((f) => /\.ya?ml$/.test(f))
        .flatMap(
          (f) =>
            (
              parseYaml(readFileSync(join(datasourcesDir!, f), 'utf8')) as {
                datasources: Record<string, unknown>[];
              }
            ).datasources,
        );
      const prometheus = datasources.find((d) => d.name === 'Prometheus');
      expect(prometheus).toMatchObject({ uid: 'prometheus', type: 'prometheus', isDefault: true });
      const url = new URL(String(prometheus!.url));
      expect(services[url.hostname], `service ${url.hostname}`).toBeDefined();
      expect(hostPortsOf(services[url.hostname]!).map((p) => p.target)).toContain(Number(url.port));

      const providersDir = hostPathOf(grafana, '/etc/grafana/provisioning/dashboards');
      expect(providersDir).toBeDefined();
      const providers = readdirSync(providersDir!)
        .filter((f) => /\.ya?ml$/.test(f))
        .flatMap(
          (f) =>
            (
              parseYaml(readFileSync(join(providersDir!, f), 'utf8')) as {
                providers: { type: string; options: { path: string } }[];
              }
            ).providers,
        );
      expect(providers.length).toBeGreaterThan(0);
      for (const provider of providers) {
        expect(provider.type).toBe('file');
        const dashboards = hostPathOf(grafana, provider.options.path);
        expect(dashboards, `${provider.options.path} mounted`).toBeDefined();
        expect(relative(root, dashboards!)).toBe(posix.join('infra', 'grafana', 'dashboards'));
      }
      const home = String(grafana.environment?.GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH ?? '');
      if (home) expect(existsSync(hostPathOf(grafana, home) ?? ''), home).toBe(true);
      expect(grafana.environment?.GF_AUTH_ANONYMOUS_ENABLED).toBe('true');
      expect(grafana.environment?.GF_AUTH_ANONYMOUS_ORG_ROLE).toBe('Viewer');
    });

    it('has dashboards that use only the provisioned datasource', async () => {
      const dir = join(root, 'infra/grafana/dashboards');
      const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.json')) : [];
      expect(files.length, 'dashboards in infra/grafana/dashboards').toBeGreaterThan(0);
      const uids = new Set<string>();
      const walk = (node: unknown): void => {
        if (Array.isArray(node)) node.forEach(walk);
        else if (node && typeof node === 'object') {
          const record = node as Record<string, unknown>;
          const ds = record.datasource as { uid?: string } | string | undefined;
          if (ds && typeof ds === 'object' && ds.uid) uids.add(ds.uid);
          else if (typeof ds === 'string') uids.add(ds);
          Object.values(record).forEach(walk);
        }
      };
      for (const file of files) walk(JSON.parse(readFileSync(join(dir, file), 'utf8')));
      // `-- Grafana --` is Grafana's built-in annotations source; `${...}` a template variable.
      const unknown = [...uids].filter(
        (uid) => uid !== 'prometheus' && uid !== '-- Grafana --' && !uid.startsWith('$'),
      );
      expect(unknown).toEqual([]);
    });

    it('has Prometheus scrape every gateway replica and load the mounted rules', async () => {
      const services = await composeServices();
      const { config: gatewayConfig } = await gatewayConfigFile();
      const prometheus = services.prometheus!;
      const configFile = hostPathOf(prometheus, '/etc/prometheus/prometheus.yml');
      expect(configFile && existsSync(configFile), 'infra/prometheus.yml').toBe(true);
      const config = parseYaml(readFileSync(configFile!, 'utf8')) as {
        global?: { scrape_interval?: string };
        rule_files?: string[];
        scrape_configs?: {
          dns_sd_configs?: { names: string[]; port?: number }[];
          static_configs?: { targets: string[] }[];
        }[];
      };
      for (const rules of config.rule_files ?? []) {
        const inContainer = posix.resolve('/etc/prometheus', rules);
        const onHost = hostPathOf(prometheus, inContainer);
        expect(onHost && existsSync(onHost), `rule file ${rules} mounted`).toBe(true);
      }
      const gatewayTargets = (config.scrape_configs ?? []).flatMap((job) => [
        ...(job.dns_sd_configs ?? [])
          .filter((sd) => sd.names.includes('gateway'))
          .map((sd) => sd.port),
        ...(job.static_configs ?? [])
          .flatMap((s) => s.targets)
          .filter((t) => t.startsWith('gateway:'))
          .map((t) => Number(t.split(':')[1])),
      ]);
      // A static `gateway:8080` would reach one replica; DNS discovery finds each of them.
      expect(gatewayTargets).toEqual([gatewayConfig.listen.port]);
      // Grafana's $__rate_interval assumes the datasource's scrape interval.
      const datasources = parseYaml(
        readFileSync(join(root, 'infra/grafana/provisioning/datasources/prometheus.yml'), 'utf8'),
      ) as { datasources: { jsonData?: { timeInterval?: string } }[] };
      const interval = datasources.datasources[0]?.jsonData?.timeInterval;
      if (interval) expect(interval).toBe(config.global?.scrape_interval ?? '1m');
    });
  },
);
