// A small live chart: the last points of a series as an SVG polyline, and its latest value.

const NS = 'http://www.w3.org/2000/svg';
const POINTS = 60;

export class Spark {
  constructor(title, unit) {
    this.points = [];
    this.unit = unit;
    this.value = document.createElement('div');
    this.value.className = 'value';
    this.svg = document.createElementNS(NS, 'svg');
    this.svg.setAttribute('viewBox', `0 0 ${POINTS} 40`);
    this.svg.setAttribute('preserveAspectRatio', 'none');
    this.line = document.createElementNS(NS, 'polyline');
    this.line.setAttribute('vector-effect', 'non-scaling-stroke');
    this.svg.append(this.line);
    this.el = document.createElement('section');
    this.el.className = 'card chart';
    const heading = document.createElement('h3');
    heading.textContent = title;
    this.el.append(heading, this.value, this.svg);
  }

  push(v) {
    this.points.push(Number.isFinite(v) ? v : 0);
    if (this.points.length > POINTS) this.points.shift();
    const max = Math.max(...this.points, 1e-9);
    // One point is drawn as a short flat line, so a fresh chart is not blank.
    const drawn = this.points.length === 1 ? [this.points[0], this.points[0]] : this.points;
    // The points so far span the whole width; the window slides once it is full.
    const step = POINTS / (drawn.length - 1);
    this.line.setAttribute('points', drawn.map((p, i) => `${(i * step).toFixed(2)},${(40 - (p / max) * 38 - 1).toFixed(2)}`).join(' '));
    this.el.dataset.points = String(this.points.length);
    this.value.textContent = `${Number.isFinite(v) ? +v.toFixed(2) : '–'} ${this.unit}`;
  }
}
