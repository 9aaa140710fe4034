//! The cost and memory of a CEL expression, bounded from its syntax tree before it runs.
//!
//! The walk is an abstract evaluation: every node gets a [`Shape`] (how long a string or list it
//! can be, how much memory one copy takes, how large an integer) instead of a value, and the cost
//! and memory of producing it are added up, a comprehension's body once per element of its
//! range. The cost model is cel-go's, as the Kubernetes API server's estimator and runtime
//! tracker count it (see [`super::budget`]), with what this interpreter does beside: it copies a
//! value into every list, map and loop variable it lands in, so those copies count as memory,
//! and concatenating lists copies their elements, so that costs one per element.
//!
//! Two bounds come out of the same walk:
//! - [`Bound::Lower`], when the BundleDeployment is admitted: the inputs are unknown and taken
//!   as empty, a conditional costs its cheaper branch and `&&`/`||` their left side only. What
//!   is over a limit then is over it for any input, and is refused before anything is read.
//! - [`Bound::Upper`], before each evaluation: the inputs are the actual objects, measured, and
//!   everything derived from them is bounded by what it is derived from. What fits then cannot
//!   exceed its budget however the evaluation goes.
//!
//! A function the walk does not know has no bound and is refused ([`BudgetError::Unsupported`]),
//! as is a comprehension of a shape no macro of the environment produces.

use cel::common::ast::{operators, CallExpr, ComprehensionExpr, EntryExpr, Expr, LiteralValue};
use cel::IdedExpr;
use serde_json::Value;

use super::budget::{BudgetError, CelLimits};

/// Bytes one value takes besides its content: the box in its list or map slot and the value's
/// own allocation, with the allocator's overhead.
pub(super) const VALUE_BYTES: u64 = 48;
/// A map entry's bytes besides its key and value (the hash table's slot and control bytes).
const ENTRY_BYTES: u64 = 24;
/// cel-go's `ListCreateBaseCost` and `MapCreateBaseCost`.
const LIST_CREATE: u64 = 10;
const MAP_CREATE: u64 = 30;
/// The most elements `lists.range` makes (the interpreter's own cap, cel-go's).
const RANGE_CAP: u64 = 1_000_000;
/// The longest text one `format` clause writes (a double with `%.100f`).
const FORMAT_CLAUSE_BYTES: u64 = 420;
/// Variables that name function namespaces when they are not bound (`lists.range(3)`).
const NAMESPACES: [&str; 3] = ["lists", "strings", "optional"];

/// Which bound the walk computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// At least this much, for any input (unknown inputs are empty).
    Lower,
    /// At most this much, for the inputs given.
    Upper,
}

/// Cost units and bytes of memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Cost units.
    pub cost: u64,
    /// Bytes of values built, copies included.
    pub memory: u64,
}

/// What kind of value a node gives, as far as the walk knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Scalar,
    String,
    List,
    Map,
    Any,
}

/// What is known of a value without it: bounds on its size, and the value itself when it is
/// (part of) an input.
#[derive(Clone, Copy, Debug)]
struct Shape<'v> {
    kind: Kind,
    /// Elements of a list, entries of a map, bytes of a string or bytes value.
    len: u64,
    /// Memory one copy takes.
    bytes: u64,
    /// Magnitude of an integer.
    int: u64,
    /// The input value this is.
    value: Option<&'v Value>,
}

impl<'v> Shape<'v> {
    const SCALAR: Shape<'static> = Shape {
        kind: Kind::Scalar,
        len: 0,
        bytes: VALUE_BYTES,
        int: 0,
        value: None,
    };

    fn int(int: u64) -> Shape<'v> {
        Shape {
            int,
            ..Shape::SCALAR
        }
    }

    fn string(len: u64) -> Shape<'v> {
        Shape {
            kind: Kind::String,
            len,
            bytes: VALUE_BYTES.saturating_add(len),
            int: 0,
            value: None,
        }
    }

    fn list(len: u64, bytes: u64) -> Shape<'v> {
        Shape {
            kind: Kind::List,
            len,
            bytes,
            int: 0,
            value: None,
        }
    }

    /// The input `value`, measured.
    fn of_json(value: &'v Value) -> Shape<'v> {
        let (len, bytes) = json_size(value);
        let kind = match value {
            Value::Null | Value::Bool(_) | Value::Number(_) => Kind::Scalar,
            Value::String(_) => Kind::String,
            Value::Array(_) => Kind::List,
            Value::Object(_) => Kind::Map,
        };
        let int = match value {
            Value::Number(n) => n
                .as_i64()
                .map(i64::unsigned_abs)
                .or(n.as_u64())
                .unwrap_or(u64::MAX),
            _ => 0,
        };
        Shape {
            kind,
            len,
            bytes,
            int,
            value: Some(value),
        }
    }

    /// The larger of two shapes, field by field.
    fn join(self, other: Shape<'v>) -> Shape<'v> {
        Shape {
            kind: if self.kind == other.kind {
                self.kind
            } else {
                Kind::Any
            },
            len: self.len.max(other.len),
            bytes: self.bytes.max(other.bytes),
            int: self.int.max(other.int),
            value: None,
        }
    }

    /// The smaller of two shapes, field by field.
    fn meet(self, other: Shape<'v>) -> Shape<'v> {
        Shape {
            kind: if self.kind == other.kind {
                self.kind
            } else {
                Kind::Any
            },
            len: self.len.min(other.len),
            bytes: self.bytes.min(other.bytes),
            int: self.int.min(other.int),
            value: None,
        }
    }
}

/// Elements (or entries, or bytes) and the memory of one copy of a JSON value.
fn json_size(value: &Value) -> (u64, u64) {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => (0, VALUE_BYTES),
        Value::String(s) => (len(s.len()), VALUE_BYTES + len(s.len())),
        Value::Array(items) => {
            let bytes = items.iter().fold(VALUE_BYTES, |sum, item| {
                sum.saturating_add(json_size(item).1)
            });
            (len(items.len()), bytes)
        }
        Value::Object(map) => {
            let bytes = map.iter().fold(VALUE_BYTES, |sum, (key, item)| {
                sum.saturating_add(VALUE_BYTES + ENTRY_BYTES + len(key.len()))
                    .saturating_add(json_size(item).1)
            });
            (len(map.len()), bytes)
        }
    }
}

fn len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// cel-go's `StringTraversalCostFactor`: a tenth of a unit per byte traversed.
fn traverse(bytes: u64) -> u64 {
    bytes.div_ceil(10)
}

fn log2(n: u64) -> u64 {
    u64::from(64 - n.leading_zeros()).max(1)
}

/// How deeply `expr` nests (a leaf is 1). Iterative: it runs before the depth is known.
pub fn depth(expr: &IdedExpr) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(expr, 1)];
    while let Some((expr, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        pending.extend(children(expr).into_iter().map(|child| (child, depth + 1)));
    }
    deepest
}

/// The nodes right under `expr`.
pub(super) fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
    match &expr.expr {
        Expr::Call(call) => call
            .target
            .as_deref()
            .into_iter()
            .chain(&call.args)
            .collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => entries(&map.entries).collect(),
        Expr::Struct(s) => entries(&s.entries).collect(),
        Expr::Select(select) => vec![&*select.operand],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

fn entries(entries: &[cel::common::ast::IdedEntryExpr]) -> impl Iterator<Item = &IdedExpr> {
    entries.iter().flat_map(|entry| match &entry.expr {
        EntryExpr::MapEntry(e) => vec![&e.key, &e.value],
        EntryExpr::StructField(f) => vec![&f.value],
    })
}

/// The cost and memory of evaluating `expr` with `inputs` (name and value; a value of `None`
/// is unknown), as a `bound`; a string or list over its limit, or something without a bound, is
/// an error at once. The caller compares the estimate with the limits.
pub fn estimate(
    expr: &IdedExpr,
    inputs: &[(&str, Option<&Value>)],
    bound: Bound,
    limits: &CelLimits,
) -> Result<Estimate, BudgetError> {
    let mut walk = Walk {
        bound,
        limits,
        inputs,
        scopes: Vec::new(),
        cost: 0,
        memory: 0,
    };
    let result = walk.expr(expr)?;
    // The result is copied out of the interpreter once.
    walk.memory = walk.memory.saturating_add(result.bytes);
    Ok(Estimate {
        cost: walk.cost,
        memory: walk.memory,
    })
}

struct Walk<'e, 'v, 'l> {
    bound: Bound,
    limits: &'l CelLimits,
    inputs: &'l [(&'l str, Option<&'v Value>)],
    scopes: Vec<(&'e str, Shape<'v>)>,
    cost: u64,
    memory: u64,
}

/// The comprehensions the environment's macros produce.
enum Fold<'e> {
    /// `all`, `exists`: a bool accumulator.
    Logical,
    /// `existsOne`: a counter.
    Count,
    /// `map`, `filter`: a list appended to, under an optional guard.
    Append {
        guard: Option<&'e IdedExpr>,
        item: &'e IdedExpr,
    },
    /// A binding (`sortBy`, `optMap`): no iterations, the accumulator is the value bound.
    Bind,
}

impl<'e> Fold<'e> {
    fn of(c: &'e ComprehensionExpr) -> Option<Fold<'e>> {
        let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if *n == c.accu_var);
        let call = |e: &'e IdedExpr| match &e.expr {
            Expr::Call(call) if call.target.is_none() => Some(call),
            _ => None,
        };
        let append_item = |e: &'e IdedExpr| {
            let call = call(e).filter(|call| call.func_name == operators::ADD)?;
            match call.args.as_slice() {
                [accu, list] if is_accu(accu) => match &list.expr {
                    Expr::List(list) if list.elements.len() == 1 => list.elements.first(),
                    _ => None,
                },
                _ => None,
            }
        };
        if matches!(&c.iter_range.expr, Expr::List(l) if l.elements.is_empty())
            && matches!(&c.loop_cond.expr, Expr::Literal(LiteralValue::Boolean(b)) if !*b.inner())
        {
            return Some(Fold::Bind);
        }
        match &c.accu_init.expr {
            Expr::Literal(LiteralValue::Boolean(_)) => {
                let step = call(&c.loop_step)?;
                let logical = [operators::LOGICAL_AND, operators::LOGICAL_OR]
                    .contains(&step.func_name.as_str());
                (logical && step.args.first().is_some_and(is_accu)).then_some(Fold::Logical)
            }
            Expr::Literal(LiteralValue::Int(_)) => {
                let step = call(&c.loop_step)?;
                (step.func_name == operators::CONDITIONAL).then_some(Fold::Count)
            }
            Expr::List(list) if list.elements.is_empty() => {
                if let Some(item) = append_item(&c.loop_step) {
                    return Some(Fold::Append { guard: None, item });
                }
                let step = call(&c.loop_step)?;
                match step.args.as_slice() {
                    [guard, append, otherwise]
                        if step.func_name == operators::CONDITIONAL && is_accu(otherwise) =>
                    {
                        Some(Fold::Append {
                            guard: Some(guard),
                            item: append_item(append)?,
                        })
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

impl<'e, 'v, 'l> Walk<'e, 'v, 'l> {
    fn add(&mut self, cost: u64) {
        self.cost = self.cost.saturating_add(cost);
    }

    fn allocate(&mut self, bytes: u64) {
        self.memory = self.memory.saturating_add(bytes);
    }

    /// A value derived from one of `within` bytes, with nothing else known: at most that large
    /// (upper bound), or nothing (lower bound).
    fn unknown(&self, within: u64) -> Shape<'v> {
        match self.bound {
            Bound::Upper => Shape {
                kind: Kind::Any,
                len: within,
                bytes: within.max(VALUE_BYTES),
                int: u64::MAX,
                value: None,
            },
            Bound::Lower => Shape {
                kind: Kind::Any,
                ..Shape::SCALAR
            },
        }
    }

    fn check_string(&self, len: u64) -> Result<(), BudgetError> {
        if len > self.limits.string_bytes {
            return Err(BudgetError::String {
                bytes: len,
                limit: self.limits.string_bytes,
            });
        }
        Ok(())
    }

    fn check_list(&self, items: u64) -> Result<(), BudgetError> {
        if items > self.limits.list_items {
            return Err(BudgetError::List {
                items,
                limit: self.limits.list_items,
            });
        }
        Ok(())
    }

    /// Walks `f` apart: its shape, cost and memory, not added to this walk's.
    fn apart<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, BudgetError>,
    ) -> Result<(T, Estimate), BudgetError> {
        let (cost, memory) = (self.cost, self.memory);
        self.cost = 0;
        self.memory = 0;
        let result = f(self);
        let spent = Estimate {
            cost: self.cost,
            memory: self.memory,
        };
        self.cost = cost;
        self.memory = memory;
        Ok((result?, spent))
    }

    fn expr(&mut self, e: &'e IdedExpr) -> Result<Shape<'v>, BudgetError> {
        match &e.expr {
            Expr::Unspecified => Ok(Shape::SCALAR),
            Expr::Literal(literal) => Ok(match literal {
                LiteralValue::String(s) => Shape::string(len(s.len())),
                LiteralValue::Bytes(b) => Shape::string(len(b.len())),
                LiteralValue::Int(i) => Shape::int(i.inner().unsigned_abs()),
                LiteralValue::UInt(u) => Shape::int(*u.inner()),
                _ => Shape::SCALAR,
            }),
            Expr::Ident(name) => {
                self.add(1);
                Ok(self.lookup(name))
            }
            Expr::Select(select) => {
                let operand = self.expr(&select.operand)?;
                self.add(1);
                Ok(if select.test {
                    Shape::SCALAR
                } else {
                    self.field(operand, &select.field)
                })
            }
            Expr::List(list) => {
                let mut bytes = VALUE_BYTES;
                for element in &list.elements {
                    bytes = bytes.saturating_add(self.expr(element)?.bytes);
                }
                let items = len(list.elements.len());
                self.check_list(items)?;
                self.add(LIST_CREATE + items);
                self.allocate(bytes);
                Ok(Shape::list(items, bytes))
            }
            Expr::Map(map) => {
                let mut bytes = VALUE_BYTES;
                for entry in entries(&map.entries) {
                    bytes = bytes.saturating_add(self.expr(entry)?.bytes);
                }
                let items = len(map.entries.len());
                bytes = bytes.saturating_add(items.saturating_mul(ENTRY_BYTES));
                self.check_list(items)?;
                self.add(MAP_CREATE + items);
                self.allocate(bytes);
                Ok(Shape {
                    kind: Kind::Map,
                    ..Shape::list(items, bytes)
                })
            }
            Expr::Struct(_) => Err(BudgetError::Unsupported("a message literal".into())),
            Expr::Call(call) => self.call(call),
            Expr::Comprehension(c) => self.comprehension(c),
        }
    }

    fn lookup(&self, name: &str) -> Shape<'v> {
        if let Some((_, shape)) = self.scopes.iter().rev().find(|(n, _)| *n == name) {
            return *shape;
        }
        match self.inputs.iter().find(|(n, _)| *n == name) {
            Some((_, Some(value))) => Shape::of_json(value),
            Some((_, None)) => self.unknown(u64::MAX),
            // A type name (`int`, `string`) or an undeclared name (an error when evaluated).
            None => Shape::SCALAR,
        }
    }

    fn bound_name(&self, name: &str) -> bool {
        self.scopes.iter().any(|(n, _)| *n == name) || self.inputs.iter().any(|(n, _)| *n == name)
    }

    /// Field `name` of `operand`.
    fn field(&self, operand: Shape<'v>, name: &str) -> Shape<'v> {
        match operand.value {
            Some(Value::Object(map)) => map.get(name).map_or(Shape::SCALAR, Shape::of_json),
            // Not a map: the selection fails.
            Some(_) => Shape::SCALAR,
            None => self.unknown(operand.bytes),
        }
    }

    /// Element `index` of `operand` (`operand[index]`).
    fn element_at(&self, operand: Shape<'v>, index: &IdedExpr) -> Shape<'v> {
        let literal = match &index.expr {
            Expr::Literal(literal) => Some(literal),
            _ => None,
        };
        match (operand.value, literal) {
            (Some(Value::Object(map)), Some(LiteralValue::String(key))) => {
                map.get(key.inner()).map_or(Shape::SCALAR, Shape::of_json)
            }
            (Some(Value::Array(items)), Some(LiteralValue::Int(i))) => usize::try_from(*i.inner())
                .ok()
                .and_then(|i| items.get(i))
                .map_or(Shape::SCALAR, Shape::of_json),
            _ => self.element(operand),
        }
    }

    /// Any element of `collection` (a key, for a map): the largest, when it is an input.
    fn element(&self, collection: Shape<'v>) -> Shape<'v> {
        match collection.value {
            Some(Value::Array(items)) => items
                .iter()
                .map(Shape::of_json)
                .reduce(Shape::join)
                .unwrap_or(Shape::SCALAR),
            Some(Value::Object(map)) => map
                .keys()
                .map(|k| Shape::string(len(k.len())))
                .reduce(Shape::join)
                .unwrap_or(Shape::SCALAR),
            Some(_) => Shape::SCALAR,
            None => self.unknown(collection.bytes),
        }
    }

    fn call(&mut self, call: &'e CallExpr) -> Result<Shape<'v>, BudgetError> {
        let name = call.func_name.as_str();
        match (name, call.args.as_slice()) {
            (operators::CONDITIONAL, [condition, yes, no]) => {
                self.expr(condition)?;
                let (yes, yes_spent) = self.apart(|w| w.expr(yes))?;
                let (no, no_spent) = self.apart(|w| w.expr(no))?;
                let (shape, spent) = match self.bound {
                    Bound::Upper => (
                        yes.join(no),
                        Estimate {
                            cost: yes_spent.cost.max(no_spent.cost),
                            memory: yes_spent.memory.max(no_spent.memory),
                        },
                    ),
                    Bound::Lower => (
                        yes.meet(no),
                        Estimate {
                            cost: yes_spent.cost.min(no_spent.cost),
                            memory: yes_spent.memory.min(no_spent.memory),
                        },
                    ),
                };
                self.add(spent.cost);
                self.allocate(spent.memory);
                return Ok(shape);
            }
            (operators::LOGICAL_AND | operators::LOGICAL_OR, [left, right]) => {
                self.expr(left)?;
                // The right side may not run: a lower bound leaves it out.
                let (_, spent) = self.apart(|w| w.expr(right))?;
                if self.bound == Bound::Upper {
                    self.add(spent.cost);
                    self.allocate(spent.memory);
                }
                return Ok(Shape::SCALAR);
            }
            (operators::OPT_SELECT, [operand, field]) => {
                let operand = self.expr(operand)?;
                self.add(1);
                let Expr::Literal(LiteralValue::String(field)) = &field.expr else {
                    return Ok(self.unknown(operand.bytes));
                };
                let shape = self.field(operand, field.inner());
                // Wrapped in an optional: a copy.
                self.allocate(shape.bytes);
                return Ok(Shape {
                    value: None,
                    ..shape
                });
            }
            (operators::INDEX | operators::OPT_INDEX, [operand, index]) => {
                let operand = self.expr(operand)?;
                self.expr(index)?;
                self.add(1);
                let shape = self.element_at(operand, index);
                if name == operators::OPT_INDEX {
                    self.allocate(shape.bytes);
                }
                return Ok(shape);
            }
            _ => {}
        }
        let (name, target) = match call.target.as_deref() {
            Some(IdedExpr {
                expr: Expr::Ident(namespace),
                ..
            }) if NAMESPACES.contains(&namespace.as_str()) && !self.bound_name(namespace) => {
                (format!("{namespace}.{name}"), None)
            }
            target => (name.to_string(), target),
        };
        let mut args = Vec::with_capacity(call.args.len() + 1);
        if let Some(target) = target {
            args.push(self.expr(target)?);
        }
        for arg in &call.args {
            args.push(self.expr(arg)?);
        }
        self.function(&name, &args)
    }

    fn comprehension(&mut self, c: &'e ComprehensionExpr) -> Result<Shape<'v>, BudgetError> {
        if c.iter_var2.is_some() {
            return Err(BudgetError::Unsupported(
                "a two-variable comprehension".into(),
            ));
        }
        let fold = Fold::of(c)
            .ok_or_else(|| BudgetError::Unsupported("a comprehension of this shape".into()))?;
        let range = self.expr(&c.iter_range)?;
        let init = self.expr(&c.accu_init)?;
        if let Fold::Bind = fold {
            self.scopes.push((&c.accu_var, init));
            let result = self.expr(&c.result);
            self.scopes.pop();
            return result;
        }
        let iterations = range.len;
        let element = self.element(range);
        self.scopes.push((&c.iter_var, element));
        self.scopes.push((&c.accu_var, Shape::int(iterations)));
        let body = self.apart(|w| {
            w.expr(&c.loop_cond)?;
            match &fold {
                Fold::Append { guard, item } => {
                    if let Some(guard) = guard {
                        w.expr(guard)?;
                    }
                    // The item is made in a list of one, then copied into the result.
                    let item = w.expr(item)?;
                    w.add(LIST_CREATE + 1);
                    w.allocate(item.bytes.saturating_mul(2).saturating_add(VALUE_BYTES));
                    Ok(item)
                }
                _ => w.expr(&c.loop_step),
            }
        });
        self.scopes.pop();
        self.scopes.pop();
        let (item, spent) = body?;
        // Each step: the body, one unit for the step, a copy of the element into the variable.
        self.add(iterations.saturating_mul(spent.cost.saturating_add(1)));
        self.allocate(iterations.saturating_mul(spent.memory.saturating_add(element.bytes)));
        let accumulated = match fold {
            Fold::Append { guard, .. } => {
                let kept = match (self.bound, guard) {
                    (Bound::Lower, Some(_)) => 0,
                    _ => iterations,
                };
                self.check_list(kept)?;
                Shape::list(
                    kept,
                    VALUE_BYTES.saturating_add(kept.saturating_mul(item.bytes)),
                )
            }
            _ => Shape::int(iterations),
        };
        self.scopes.push((&c.accu_var, accumulated));
        let result = self.expr(&c.result);
        self.scopes.pop();
        result
    }

    /// A function or operator on `args` (a member function's target first): its result, with
    /// its cost and memory added.
    fn function(&mut self, name: &str, args: &[Shape<'v>]) -> Result<Shape<'v>, BudgetError> {
        let arg = |i: usize| args.get(i).copied().unwrap_or(Shape::SCALAR);
        let (a, b) = (arg(0), arg(1));
        let upper = self.bound == Bound::Upper;
        let (cost, shape) = match name {
            "size" => (1, Shape::int(a.len)),
            operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS => {
                let compared = a.bytes.min(b.bytes).saturating_sub(VALUE_BYTES);
                (1 + traverse(compared), Shape::SCALAR)
            }
            operators::ADD => add_shapes(a, b),
            operators::SUBSTRACT | operators::DIVIDE | operators::MODULO => {
                (1, Shape::int(a.int.max(b.int)))
            }
            operators::MULTIPLY => (1, Shape::int(a.int.saturating_mul(b.int))),
            operators::LOGICAL_NOT | operators::NEGATE | operators::NOT_STRICTLY_FALSE => {
                (1, Shape::int(a.int))
            }
            operators::IN => (1 + b.len + traverse(b.bytes), Shape::SCALAR),
            "contains" | "indexOf" | "lastIndexOf" => (
                1 + traverse(a.len).saturating_mul(traverse(b.len).max(1)),
                Shape::int(a.len),
            ),
            "startsWith" | "endsWith" => (1 + traverse(a.len.min(b.len)), Shape::SCALAR),
            "matches" => {
                // The pattern is compiled at each call.
                self.allocate(b.len.saturating_mul(64));
                let text = traverse(a.len.saturating_add(1));
                (
                    1 + text.saturating_mul(b.len.div_ceil(4).max(1)),
                    Shape::SCALAR,
                )
            }
            "charAt" => (1 + traverse(a.len), Shape::string(4)),
            "lowerAscii" | "upperAscii" | "trim" | "substring" => {
                (1 + traverse(a.len), Shape::string(a.len))
            }
            "reverse" => match a.kind {
                Kind::String => (1 + traverse(a.len), Shape::string(a.len)),
                _ => (1 + a.len, Shape::list(a.len, a.bytes)),
            },
            "strings.quote" => (
                1 + traverse(a.len),
                Shape::string(a.len.saturating_mul(2).saturating_add(2)),
            ),
            "replace" => self.replace(args),
            "split" => {
                let pieces = match (self.bound, args.get(2)) {
                    (Bound::Lower, _) => 1,
                    (Bound::Upper, Some(n)) => n.int.min(a.len.saturating_add(1)),
                    (Bound::Upper, None) => a.len.saturating_add(1),
                };
                let bytes = VALUE_BYTES
                    .saturating_add(pieces.saturating_mul(VALUE_BYTES))
                    .saturating_add(a.len);
                (1 + traverse(a.len) + pieces, Shape::list(pieces, bytes))
            }
            "join" => {
                let separators = if upper {
                    a.len.saturating_mul(b.len)
                } else {
                    0
                };
                let text = if upper { a.bytes } else { 0 };
                let len = text.saturating_add(separators);
                (1 + a.len + traverse(len), Shape::string(len))
            }
            "format" => {
                let len = if upper {
                    b.len
                        .saturating_mul(FORMAT_CLAUSE_BYTES)
                        .saturating_add(b.bytes.saturating_mul(2))
                        .saturating_add(a.len)
                } else {
                    a.len
                };
                (1 + traverse(len), Shape::string(len))
            }
            "slice" | "@sortByAssociatedKeys" | "sort" => {
                let comparisons = match name {
                    "slice" => 1,
                    _ => log2(a.len),
                };
                (
                    1 + a.len.saturating_mul(comparisons) + traverse(a.bytes),
                    Shape::list(a.len, a.bytes),
                )
            }
            "distinct" => (
                1 + a.len.saturating_mul(a.len) + traverse(a.bytes),
                Shape::list(a.len, a.bytes),
            ),
            "flatten" => {
                let items = if upper { a.bytes / VALUE_BYTES } else { 0 };
                (1 + items, Shape::list(items, a.bytes))
            }
            "lists.range" => {
                let n = a.int.min(RANGE_CAP);
                let bytes = VALUE_BYTES.saturating_add(n.saturating_mul(VALUE_BYTES));
                (1 + n, Shape::list(n, bytes))
            }
            "string" | "bytes" => {
                // A double is written out in full (`1e308` as 309 digits).
                let len = match a.kind {
                    Kind::String => a.len,
                    Kind::Scalar => 400,
                    _ if upper => a.len.saturating_add(400),
                    _ => 0,
                };
                (1 + traverse(len), Shape::string(len))
            }
            "int" | "uint" | "double" | "bool" | "timestamp" | "duration" | "type" | "hasValue"
            | "optional.none" | "getDate" | "getDayOfMonth" | "getDayOfWeek" | "getDayOfYear"
            | "getFullYear" | "getHours" | "getMilliseconds" | "getMinutes" | "getMonth"
            | "getSeconds" => (1 + traverse(a.len), Shape::int(u64::MAX)),
            "dyn" => (1, a),
            "optional.of" | "optional.ofNonZeroValue" | "value" => (1, a),
            "orValue" | "or" => (1, if upper { a.join(b) } else { a.meet(b) }),
            other => {
                return Err(BudgetError::Unsupported(format!(
                    "function {}",
                    other.trim_start_matches('@')
                )))
            }
        };
        self.add(cost);
        // `dyn` passes its argument on; every other function makes a new value.
        if name == "dyn" {
            return Ok(shape);
        }
        let built = Shape {
            value: None,
            ..shape
        };
        match built.kind {
            Kind::String => self.check_string(built.len)?,
            Kind::List | Kind::Map => self.check_list(built.len)?,
            Kind::Scalar | Kind::Any => {}
        }
        self.allocate(built.bytes);
        Ok(built)
    }

    /// `s.replace(old, new[, n])`: each of up to n matches (an empty `old` matches between any
    /// two characters) becomes `new`.
    fn replace(&self, args: &[Shape<'v>]) -> (u64, Shape<'v>) {
        let arg = |i: usize| args.get(i).copied().unwrap_or(Shape::SCALAR);
        let (s, old, new) = (arg(0), arg(1), arg(2));
        let places = s.len.saturating_add(1);
        let count = match (self.bound, args.get(3)) {
            (Bound::Lower, _) => 0,
            (Bound::Upper, Some(n)) => n.int.min(places),
            (Bound::Upper, None) => places,
        };
        let len = s.len.saturating_add(count.saturating_mul(new.len));
        let search = traverse(s.len).saturating_mul(traverse(old.len).max(1));
        (1 + search + traverse(len), Shape::string(len))
    }
}

/// `a + b`: numbers add, strings and lists concatenate (copying every element).
fn add_shapes<'v>(a: Shape<'v>, b: Shape<'v>) -> (u64, Shape<'v>) {
    let len = a.len.saturating_add(b.len);
    let kind = match (a.kind, b.kind) {
        (Kind::Scalar, Kind::Scalar) => return (1, Shape::int(a.int.saturating_add(b.int))),
        (Kind::String, _) | (_, Kind::String) => Kind::String,
        (Kind::List, _) | (_, Kind::List) => Kind::List,
        _ => Kind::Any,
    };
    let cost = match kind {
        Kind::String => 1 + traverse(len),
        _ => 1 + len,
    };
    let shape = Shape {
        kind,
        len,
        bytes: a.bytes.saturating_add(b.bytes),
        int: a.int.saturating_add(b.int),
        value: None,
    };
    (cost, shape)
}

#[cfg(test)]
mod tests;
