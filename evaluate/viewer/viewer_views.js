// ---- the views, the question view, sortable tables, start-up -----------------------------------------------------
const VIEW_NAMES = ["runs", "slices", "samples", "question", "reports"];

function showView(name) {
  const view = VIEW_NAMES.includes(name) ? name : DATA.view;
  for (const v of VIEW_NAMES) document.getElementById("view-" + v).hidden = v !== view;
  document.querySelectorAll("#views a").forEach((a) => a.classList.toggle("active", a.dataset.view === view));
  document.body.dataset.view = view;
  if (view === "samples" && moreWatcher && drawn < shown.length) {
    moreWatcher.unobserve(moreBox);
    moreWatcher.observe(moreBox);
  }
  return view;
}

// the nav keeps the address's other words (filters) when it switches view
document.getElementById("views").addEventListener("click", (e) => {
  const a = e.target.closest("a[data-view]");
  if (!a) return;
  e.preventDefault();
  const state = readAddress();
  state.v = a.dataset.view;
  location.hash = addressOf(state);
});

// ---- the question view: every run's answer, route and judgment for one question ----------------------------------
function runsOrder(cardIndices) {
  const ref = values.run.indexOf(DATA.reference);
  return cardIndices.slice().sort((a, b) => {
    const ra = columns.run[a], rb = columns.run[b];
    return (ra === ref ? -1 : 0) - (rb === ref ? -1 : 0) || ra - rb;
  });
}

function questionRow(i) {
  const c = cardData(i);
  const s1 = c.s1 || {}, s2 = c.s2;
  const j = (c.judge || [])[0];
  const stage2 = !s2 ? "-" : s2.acc ? "accepted " + esc(win(s2.acc)) + ", " + esc(s2.cycles) + " cycles" :
    esc(s2.fb || "no window accepted") + ", " + esc(s2.cycles) + " cycles";
  return '<tr data-run="' + esc(c.f.run) + '" data-pred="' + esc(c.pred) + '" class="' + verdictClass(c.f) + '"><td>' +
    esc(c.f.run) + (c.f.run === DATA.reference ? " ★" : "") + "</td><td><b>" + esc(c.pred) + "</b></td><td>" + esc(c.f.correct) +
    "</td><td>" + esc(c.f.route) + "</td><td>" + num(s1.m, 4) + " / " + num(s1.tau, 4) + "</td><td>" + stage2 + "</td><td>" +
    (j ? num(j.traj) : "-") + "</td><td>" + (j ? num(j.mc) : "-") + "</td><td>" + (j ? j.tags.map(tagLink).join(" ") || "none" : "-") +
    "</td></tr>";
}

function questionPicker(note) {
  const disagree = [];
  for (let j = 0; j < NQ && disagree.length < 200; j++) {
    const cs = cardsOfQuestion[j];
    if (cs.length > 1 && new Set(cs.map((i) => columns.correct[i])).size > 1) disagree.push(j);
  }
  const several = cardsOfQuestion.filter((cs) => cs.length > 1).length;
  return (note || "") + '<p>Open a question: <input id="question-key" list="question-keys" placeholder="benchmark/sample id" ' +
    'size="40"> (or follow “all runs on this question” on a card). ' + several + " questions were answered by more than one run.</p>" +
    "<h3>Questions the runs disagree on (first " + disagree.length + ')</h3><ul class="disagree">' + disagree.map((j) => {
      const key = questionKey(j);
      const pattern = runsOrder(cardsOfQuestion[j]).map((i) => values.run[columns.run[i]] + " " +
        (values.correct[columns.correct[i]] === "correct" ? "✓" : "✗")).join(", ");
      return '<li><a href="' + esc(addressOf({ v: "question", q: key, f: [], all: false })) + '">' + esc(key) + "</a> " + esc(pattern) + "</li>";
    }).join("") + "</ul>";
}

function drawQuestion(key) {
  const box = document.getElementById("question");
  const j = key ? questionOfKey(key) : undefined;
  if (j === undefined) {
    box.innerHTML = questionPicker(key ? '<p class="bad">No question ' + esc(key) + " in these runs.</p>" : "");
    const input = document.getElementById("question-key");
    input.addEventListener("change", () => { location.hash = addressOf({ v: "question", q: input.value.trim(), f: [], all: false }); });
    return;
  }
  const q = questionLines.get(j);
  const cards = runsOrder(cardsOfQuestion[j]);
  const gt = (q.ms || []).length ? '<h4>Ground-truth milestones</h4><div class="scroll"><table class="milestones"><thead><tr>' +
    "<th>milestone</th><th>type</th><th>what must be seen</th></tr></thead><tbody>" + q.ms.map((m) => "<tr><td>" + esc(m.id) +
      "</td><td>" + esc(m.type || "") + "</td><td>" + esc(m.d || "") + "</td></tr>").join("") + "</tbody></table></div>" : "";
  const step = (d) => {
    for (let k = j + d; k >= 0 && k < NQ; k += d) if (cardsOfQuestion[k].length > 1) return questionKey(k);
    return null;
  };
  const link = (k, text) => k ? '<a href="' + esc(addressOf({ v: "question", q: k, f: [], all: false })) + '">' + text + "</a>" : "";
  box.innerHTML = '<p class="qnav">' + link(step(-1), "← previous") + " " + link(step(1), "next →") +
    ' · <a href="#v=question">questions the runs disagree on</a></p>' +
    '<h2 data-key="' + esc(key) + '">' + esc(key) + (q.qid !== null && q.qid !== undefined ? " (question " + esc(q.qid) + ")" : "") +
    '</h2><p class="q">' + esc(q.q) + "</p>" + options({ opts: q.opts, letters: q.letters, gold: q.gold, pred: null, s1: null }) +
    "<p>video " + esc(q.video) + "</p>" + gt + "<h4>" + cards.length + ' runs answered it</h4><div class="scroll">' +
    '<table class="sortable runs-on-question"><thead><tr><th>run</th><th>answer</th><th>correct</th><th>route</th>' +
    "<th>M / τ</th><th>Stage 2</th><th>Traj</th><th>MC</th><th>failure tags</th></tr></thead><tbody>" +
    cards.map(questionRow).join("") + "</tbody></table></div>" + cards.map(cardHtml).join("");
}

// ---- sortable tables: a click on a header sorts by that column (numbers by data-v, else text), again reverses ----
document.addEventListener("click", (e) => {
  const th = e.target.closest("table.sortable thead th");
  if (!th) return;
  const table = th.closest("table");
  const column = Array.from(th.parentNode.children).indexOf(th);
  const down = th.dataset.sorted !== "down";
  table.querySelectorAll("thead th").forEach((h) => delete h.dataset.sorted);
  th.dataset.sorted = down ? "down" : "up";
  const key = (row) => {
    const cell = row.children[column];
    if (!cell) return [1, ""];
    const v = cell.dataset.v;
    return v !== undefined && v !== "" && !isNaN(Number(v)) ? [0, Number(v)] : [cell.dataset.v === "" ? 2 : 1, cell.textContent];
  };
  const body = table.tBodies[0];
  const rows = Array.from(body.rows).map((r) => [key(r), r]);
  rows.sort((a, b) => {
    if (a[0][0] !== b[0][0]) return a[0][0] - b[0][0];  // numbers, then text, then the empty cells
    const order = a[0][1] < b[0][1] ? -1 : a[0][1] > b[0][1] ? 1 : 0;
    return down ? -order : order;
  });
  rows.forEach((r) => body.appendChild(r[1]));
});

// ---- start-up and the address ------------------------------------------------------------------------------------
function applyAddress() {
  const state = readAddress();
  drawEverything = state.all;
  chooseFromAddress(state);
  update();
  const view = showView(state.v || (state.q ? "question" : state.f.length ? "samples" : null));
  if (view === "question") drawQuestion(state.q);
}

drawFilters();
applyAddress();
window.addEventListener("hashchange", applyAddress);
document.body.dataset.scriptMs = (performance.now() - started).toFixed(1);
document.body.dataset.readyMs = performance.now().toFixed(1);
document.body.dataset.ready = "1";
// usable: the first screen (summary or first cards) is drawn and painted, measured from navigation
afterPaint(() => { document.body.dataset.usableMs = performance.now().toFixed(1); });
