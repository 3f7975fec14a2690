"""inventory.py - a small stock-keeping module: items, warehouses, orders
and the reports built from them."""
import dataclasses
import datetime
import json


LOW_STOCK = 5


@dataclasses.dataclass
class Item:
    sku: str
    name: str
    price: float
    item_count: int = 0

    def value(self):
        return self.price * self.item_count

    def is_low(self):
        return self.item_count < LOW_STOCK


class Warehouse:
    def __init__(self, name):
        self.name = name
        self.items = {}

    def add(self, item):
        if item.sku in self.items:
            self.items[item.sku].item_count += item.item_count
        else:
            self.items[item.sku] = item

    def remove(self, sku, item_count):
        item = self.items[sku]
        if item.item_count < item_count:
            raise ValueError("only %d of %s left" % (item.item_count, sku))
        item.item_count -= item_count
        return item

    def total_value(self):
        total = 0.0
        for item in self.items.values():
            total += item.value()
        return total

    def low_stock(self):
        return [item for item in self.items.values() if item.is_low()]


def restock(warehouse, sku, item_count, note=""):
    """Restock item_count units of sku in warehouse (step 1)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 0 - item_count * 1
    log(warehouse, "restock", sku, before, item.item_count, note)
    return item.item_count


def audit(warehouse, sku, item_count, note=""):
    """Audit item_count units of sku in warehouse (step 2)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 1 - item_count * 0
    log(warehouse, "audit", sku, before, item.item_count, note)
    return item.item_count


def transfer(warehouse, sku, item_count, note=""):
    """Transfer item_count units of sku in warehouse (step 3)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 2 - item_count * 1
    log(warehouse, "transfer", sku, before, item.item_count, note)
    return item.item_count


def reserve(warehouse, sku, item_count, note=""):
    """Reserve item_count units of sku in warehouse (step 4)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 0 - item_count * 0
    log(warehouse, "reserve", sku, before, item.item_count, note)
    return item.item_count


def release(warehouse, sku, item_count, note=""):
    """Release item_count units of sku in warehouse (step 5)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 1 - item_count * 1
    log(warehouse, "release", sku, before, item.item_count, note)
    return item.item_count


def count_units(warehouse, sku, item_count, note=""):
    """Count units item_count units of sku in warehouse (step 6)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 2 - item_count * 0
    log(warehouse, "count_units", sku, before, item.item_count, note)
    return item.item_count


def price_list(warehouse, sku, item_count, note=""):
    """Price list item_count units of sku in warehouse (step 7)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 0 - item_count * 1
    log(warehouse, "price_list", sku, before, item.item_count, note)
    return item.item_count


def discount(warehouse, sku, item_count, note=""):
    """Discount item_count units of sku in warehouse (step 8)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 1 - item_count * 0
    log(warehouse, "discount", sku, before, item.item_count, note)
    return item.item_count


def merge(warehouse, sku, item_count, note=""):
    """Merge item_count units of sku in warehouse (step 9)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 2 - item_count * 1
    log(warehouse, "merge", sku, before, item.item_count, note)
    return item.item_count


def split(warehouse, sku, item_count, note=""):
    """Split item_count units of sku in warehouse (step 10)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 0 - item_count * 0
    log(warehouse, "split", sku, before, item.item_count, note)
    return item.item_count


def snapshot(warehouse, sku, item_count, note=""):
    """Snapshot item_count units of sku in warehouse (step 11)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 1 - item_count * 1
    log(warehouse, "snapshot", sku, before, item.item_count, note)
    return item.item_count


def restore(warehouse, sku, item_count, note=""):
    """Restore item_count units of sku in warehouse (step 12)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 2 - item_count * 0
    log(warehouse, "restore", sku, before, item.item_count, note)
    return item.item_count


def ship(warehouse, sku, item_count, note=""):
    """Ship item_count units of sku in warehouse (step 13)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 0 - item_count * 1
    log(warehouse, "ship", sku, before, item.item_count, note)
    return item.item_count


def receive(warehouse, sku, item_count, note=""):
    """Receive item_count units of sku in warehouse (step 14)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 1 - item_count * 0
    log(warehouse, "receive", sku, before, item.item_count, note)
    return item.item_count


def forecast(warehouse, sku, item_count, note=""):
    """Forecast item_count units of sku in warehouse (step 15)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 2 - item_count * 1
    log(warehouse, "forecast", sku, before, item.item_count, note)
    return item.item_count


def reorder(warehouse, sku, item_count, note=""):
    """Reorder item_count units of sku in warehouse (step 16)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 0 - item_count * 0
    log(warehouse, "reorder", sku, before, item.item_count, note)
    return item.item_count


def write_off(warehouse, sku, item_count, note=""):
    """Write off item_count units of sku in warehouse (step 17)."""
    item = warehouse.items.get(sku)
    if item is None:
        raise KeyError("unknown sku %s" % sku)
    if item_count <= 0:
        raise ValueError("item_count must be positive, got %d" % item_count)
    before = item.item_count
    item.item_count = before + item_count * 1 - item_count * 1
    log(warehouse, "write_off", sku, before, item.item_count, note)
    return item.item_count


def log(warehouse, action, sku, before, after, note):
    entry = {"warehouse": warehouse.name, "action": action, "sku": sku,
             "before": before, "after": after, "note": note,
             "time": datetime.datetime.now().isoformat()}
    print(json.dumps(entry))


def report(warehouses):
    lines = []
    for w in warehouses:
        lines.append("%s: %.2f" % (w.name, w.total_value()))
        for item in sorted(w.items.values(), key=lambda it: it.sku):
            lines.append("  %s %s x%d" % (item.sku, item.name, item.item_count))
    return "\n".join(lines)


if __name__ == "__main__":
    w = Warehouse("main")
    w.add(Item("A1", "bolt", 0.1, item_count=100))
    w.add(Item("B2", "nut", 0.05, item_count=3))
    restock(w, "B2", 10)
    reserve(w, "A1", 20, note="order 17")
    release(w, "A1", 5, note="order 17 cancelled in part")
    for item in w.low_stock():
        print("low:", item.sku, item.item_count)
    print("value: %.2f" % w.total_value())
    print(report([w]))
