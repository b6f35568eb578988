// tpucared's page: follows the daemon without a reload by polling the JSON the page was
// rendered from (body data-poll, a /v1/... URL) and redrawing the parts that change. Every
// text goes in through textContent, never innerHTML: a name with HTML in it stays text.
"use strict";

const POLL_MS = Number(document.body.dataset.pollMs) || 2000;  // the server says (body data-poll-ms)
const SVG = "http://www.w3.org/2000/svg";

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function link(href, text) {
  const a = el("a", text);
  a.href = href;
  return a;
}

function row(cells, cls) {
  const tr = el("tr", null, cls);
  for (const c of cells) {
    const td = el("td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c === null || c === undefined ? "" : String(c);
    tr.appendChild(td);
  }
  return tr;
}

function numeric(tr, ...indexes) {
  for (const i of indexes) tr.children[i].className = "num";
  return tr;
}

function replaceBody(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  if (!body) return;
  body.replaceChildren(...rows);
}

function slotHref(fleet, slot) {
  return "/slots/" + encodeURIComponent(fleet) + "/" + slot;
}

function renderOverview(doc) {
  document.getElementById("ledger-headline").textContent =
    doc.ledger.headline || "the ledger is being summed (refreshed every minute)";
  replaceBody("fleets", doc.fleets.map((f) => {
    const states = el("span");
    for (const [state, n] of Object.entries(f.states)) {
      const a = link("/slots?fleet=" + encodeURIComponent(f.name) + "&state=" + encodeURIComponent(state), state + " " + n);
      a.className = "badge state-" + state;
      states.append(a, " ");
    }
    const name = el("span");
    name.append(link("/slots?fleet=" + encodeURIComponent(f.name), f.name), f.down ? " (down)" : "");
    const tr = row([name, f.slots, states, f.waiting, f.failing_zones.join(", ")]);
    tr.dataset.fleet = f.name;
    return numeric(tr, 1, 3);
  }));
  const hunt = [];
  for (const f of doc.fleets) {
    for (const w of f.waiting_slots) {
      hunt.push(row([link(slotHref(f.name, w.slot), f.name + "/" + w.slot), w.since, w.next_zone,
        w.next_create_at, w.create_failures, w.last_error]));
    }
  }
  replaceBody("hunt", hunt);
  replaceBody("zones", doc.zones.map((z) => row([z.project + "/" + z.zone, z.failed_lists,
    z.failing_since, z.next_list_at, z.error_message])));
}

function minutes(seconds) {
  return seconds === null || seconds === undefined ? "" : Math.round(seconds / 60) + " min";
}

function percent(share) {
  return share === null || share === undefined ? "" : Math.round(share * 100) + "%";
}

function renderSlots(doc) {
  document.getElementById("total").textContent = String(doc.total);
  replaceBody("slots", doc.slots.map((s) => {
    const tr = row([link(slotHref(s.fleet, s.slot), s.fleet + "/" + s.slot), s.state, s.node, s.zone,
      s.attempt ? "#" + s.attempt.number + " " + s.attempt.state : "", s.uptime, percent(s.goodput_today),
      minutes(s.lost_today_s), s.maintenance ? s.maintenance.start : "", s.last_error], "state-" + s.state);
    tr.dataset.slot = s.fleet + "/" + s.slot;
    tr.dataset.state = s.state;
    return numeric(tr, 6, 7);
  }));
}

function placeTimeline(svg) {
  // The strip starts at the range's start, or at the slot's first record if later.
  const rects = svg.querySelectorAll("rect");
  const first = rects.length ? Date.parse(rects[0].dataset.start) : -Infinity;
  const since = Math.max(Date.parse(svg.dataset.since), first), until = Date.parse(svg.dataset.until);
  const span = Math.max(1, until - since);
  for (const r of rects) {
    const a = Math.max(since, Date.parse(r.dataset.start)), b = Math.min(until, Date.parse(r.dataset.end));
    r.setAttribute("x", String(((a - since) / span) * 1000));
    r.setAttribute("width", String(Math.max(0, ((b - a) / span) * 1000)));
  }
}

function renderSlot(doc) {
  const s = doc.slot;
  const badge = document.getElementById("state");
  badge.textContent = s.state;
  badge.className = "badge state-" + s.state;
  badge.dataset.state = s.state;
  let summary = "node " + (s.node || "none") + " in " + (s.zone || "no zone");
  if (s.uptime) summary += ", up " + s.uptime;
  if (s.attempt) summary += ", attempt #" + s.attempt.number + " " + s.attempt.state;
  if (s.maintenance) summary += ", next maintenance " + s.maintenance.start;
  document.getElementById("summary").textContent = summary;
  const svg = document.getElementById("timeline");
  svg.dataset.since = doc.timeline.since;
  svg.dataset.until = doc.timeline.until;
  svg.replaceChildren(...doc.timeline.intervals.map((i) => {
    const r = document.createElementNS(SVG, "rect");
    r.setAttribute("class", "cat-" + i.category);
    r.dataset.category = i.category;
    r.dataset.start = i.start;
    r.dataset.end = i.end;
    r.setAttribute("y", "0");
    r.setAttribute("height", "24");
    const t = document.createElementNS(SVG, "title");
    t.textContent = i.category + (i.cause ? " (" + i.cause + ")" : "") + ": " + i.start + " to " + i.end;
    r.appendChild(t);
    return r;
  }));
  placeTimeline(svg);
  const t = doc.timeline;
  document.getElementById("goodput").textContent =
    t.goodput === null ? "" : "goodput " + (t.goodput * 100).toFixed(1) + "%, lost " + minutes(t.lost_s);
  replaceBody("incarnations", doc.incarnations.map((n) => row([n.name, n.zone, n.phase,
    n.requested_at, n.ready_at, n.dead_at || n.deleted_at, n.loss_cause], "state-" + n.phase)));
  replaceBody("attempts", doc.attempts.map((a) => row([a.number, a.state, a.started_at, a.ended_at,
    Object.entries(a.exit_codes).map(([w, c]) => w + ":" + c).join(" "), a.detail])));
  replaceBody("events", doc.events.map((e) => row([e.at, e.kind, e.node, e.message])));
}

const RENDER = { overview: renderOverview, slots: renderSlots, slot: renderSlot };

async function poll(kind, url) {
  const live = document.getElementById("live");
  try {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (!response.ok) throw new Error(response.status + " " + response.statusText);
    RENDER[kind](await response.json());
    live.textContent = "live";
    live.className = "live";
  } catch (err) {
    live.textContent = "not updating: " + err.message;
    live.className = "live stale";
  }
  setTimeout(() => poll(kind, url), POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  const kind = document.body.dataset.kind, url = document.body.dataset.poll;
  const svg = document.getElementById("timeline");
  if (svg) placeTimeline(svg);
  if (RENDER[kind] && url) setTimeout(() => poll(kind, url), POLL_MS);
});
