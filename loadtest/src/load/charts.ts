import * as echarts from 'echarts';

/**
 * Charts as SVG strings, rendered in Node by Apache ECharts' server-side SVG renderer (no
 * DOM, no browser, no canvas). Each chart is written as an .svg file and inlined in the
 * HTML report.
 */
export interface LineSeries {
  name: string;
  data: Array<[number, number | null]>;
  color?: string;
  dash?: 'solid' | 'dashed' | 'dotted';
  step?: boolean;
  area?: boolean;
  width?: number;
  /** 0 = left axis, 1 = right axis. */
  yAxis?: 0 | 1;
}

export interface ScatterSeries {
  name: string;
  data: Array<[number, number]>;
  color: string;
  symbol?: string;
  size?: number;
}

export interface HLine {
  name: string;
  y: number;
  color?: string;
}

/** A vertical marker at x (an event: a batch submitted, ended). */
export interface VLine {
  name: string;
  x: number;
  color?: string;
}

export interface ChartSpec {
  title: string;
  subtitle?: string;
  xName: string;
  yName: string;
  y2Name?: string;
  lines: LineSeries[];
  scatters?: ScatterSeries[];
  hlines?: HLine[];
  vlines?: VLine[];
  width?: number;
  height?: number;
  yMin?: number;
  y2Min?: number;
  y2Max?: number;
  /** Category x axis (labels) instead of a value axis. */
  categories?: string[];
}

export const PALETTE = [
  '#2563eb',
  '#dc2626',
  '#16a34a',
  '#9333ea',
  '#ea580c',
  '#0891b2',
  '#4b5563',
];

function render(option: Record<string, unknown>, width: number, height: number): string {
  const chart = echarts.init(null, null, { renderer: 'svg', ssr: true, width, height });
  try {
    chart.setOption({ animation: false, backgroundColor: '#ffffff', ...option });
    return chart.renderToSVGString();
  } finally {
    chart.dispose();
  }
}

export function lineChart(spec: ChartSpec): string {
  const width = spec.width ?? 720;
  const height = spec.height ?? 340;
  const series: Record<string, unknown>[] = spec.lines.map((l) => ({
    name: l.name,
    type: 'line',
    data: spec.categories ? l.data.map((d) => d[1]) : l.data,
    showSymbol: Boolean(spec.categories),
    symbolSize: 6,
    connectNulls: false,
    step: l.step ? 'end' : false,
    yAxisIndex: l.yAxis ?? 0,
    lineStyle: {
      width: l.width ?? 1.6,
      type: l.dash ?? 'solid',
      ...(l.color ? { color: l.color } : {}),
    },
    ...(l.color ? { itemStyle: { color: l.color } } : {}),
    ...(l.area ? { areaStyle: { opacity: 0.12 } } : {}),
  }));
  for (const s of spec.scatters ?? []) {
    series.push({
      name: s.name,
      type: 'scatter',
      data: s.data,
      symbol: s.symbol ?? 'circle',
      symbolSize: s.size ?? 8,
      itemStyle: { color: s.color },
    });
  }
  const hlines = spec.hlines ?? [];
  const vlines = spec.vlines ?? [];
  if ((hlines.length > 0 || vlines.length > 0) && series.length > 0) {
    series[0] = {
      ...series[0],
      markLine: {
        symbol: 'none',
        silent: true,
        // Alternate label ends so two lines close together keep readable labels.
        data: [
          ...hlines.map((h, i) => ({
            name: h.name,
            yAxis: h.y,
            lineStyle: { color: h.color ?? '#111827', type: 'dashed', width: 1.4 },
            label: {
              formatter: h.name,
              position: i % 2 === 0 ? 'insideEndTop' : 'insideStartBottom',
              color: h.color ?? '#111827',
            },
          })),
          ...vlines.map((v, i) => ({
            name: v.name,
            xAxis: v.x,
            lineStyle: { color: v.color ?? '#6b7280', type: 'dotted', width: 1.4 },
            label: {
              formatter: v.name,
              position: i % 2 === 0 ? 'insideEndTop' : 'insideEndBottom',
              color: v.color ?? '#6b7280',
              fontSize: 10,
            },
          })),
        ],
      },
    };
  }
  const yAxis: Record<string, unknown>[] = [
    {
      type: 'value',
      name: spec.yName,
      nameTextStyle: { align: 'left' },
      ...(spec.yMin !== undefined ? { min: spec.yMin } : {}),
      splitLine: { lineStyle: { color: '#e5e7eb' } },
    },
  ];
  if (spec.y2Name)
    yAxis.push({
      type: 'value',
      name: spec.y2Name,
      splitLine: { show: false },
      ...(spec.y2Min !== undefined ? { min: spec.y2Min } : {}),
      ...(spec.y2Max !== undefined ? { max: spec.y2Max } : {}),
    });
  return render(
    {
      title: {
        text: spec.title,
        ...(spec.subtitle ? { subtext: spec.subtitle } : {}),
        left: 10,
        textStyle: { fontSize: 14 },
      },
      legend: { bottom: 4, left: 'center', type: 'plain', textStyle: { fontSize: 11 } },
      grid: { left: 60, right: spec.y2Name ? 60 : 24, top: spec.subtitle ? 78 : 60, bottom: 78 },
      xAxis: spec.categories
        ? {
            type: 'category',
            data: spec.categories,
            name: spec.xName,
            nameLocation: 'middle',
            nameGap: 28,
          }
        : {
            type: 'value',
            name: spec.xName,
            nameLocation: 'middle',
            nameGap: 28,
            min: 0,
            splitLine: { show: false },
          },
      yAxis,
      color: PALETTE,
      series,
    },
    width,
    height,
  );
}

export interface BarGroup {
  name: string;
  values: Array<number | null>;
  color?: string;
}

export function barChart(spec: {
  title: string;
  subtitle?: string;
  categories: string[];
  yName: string;
  groups: BarGroup[];
  hlines?: HLine[];
  width?: number;
  height?: number;
}): string {
  const series: Record<string, unknown>[] = spec.groups.map((g) => ({
    name: g.name,
    type: 'bar',
    data: g.values,
    label: { show: true, position: 'top', fontSize: 10 },
    ...(g.color ? { itemStyle: { color: g.color } } : {}),
  }));
  if ((spec.hlines ?? []).length > 0 && series.length > 0) {
    series[0] = {
      ...series[0],
      markLine: {
        symbol: 'none',
        silent: true,
        data: (spec.hlines ?? []).map((h) => ({
          name: h.name,
          yAxis: h.y,
          lineStyle: { color: h.color ?? '#111827', type: 'dashed' },
          label: { formatter: h.name, position: 'insideEndTop' },
        })),
      },
    };
  }
  return render(
    {
      title: {
        text: spec.title,
        ...(spec.subtitle ? { subtext: spec.subtitle } : {}),
        left: 10,
        textStyle: { fontSize: 14 },
      },
      legend: { bottom: 4, left: 'center' },
      grid: { left: 60, right: 24, top: spec.subtitle ? 78 : 60, bottom: 56 },
      xAxis: { type: 'category', data: spec.categories },
      yAxis: { type: 'value', name: spec.yName, splitLine: { lineStyle: { color: '#e5e7eb' } } },
      color: PALETTE,
      series,
    },
    spec.width ?? 720,
    spec.height ?? 320,
  );
}
