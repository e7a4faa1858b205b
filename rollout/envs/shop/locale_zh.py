"""Chinese word tables of the shop's ``zh`` locale (C-WebShop, TGPO's benchmark, is Chinese).

``ZH`` maps every English catalogue term (``catalog.all_terms()``) to Chinese; ``LABELS`` holds the page labels the
server renders and the oracle looks for; ``SURNAMES`` / ``GIVEN_NAMES`` / ``CITIES`` / ``ROADS`` make the checkout
tasks' names and addresses.
"""
from __future__ import annotations

import re

_WORDS = {
    # categories
    "Clothing": "服装", "Shoes": "鞋类", "Running shoes": "跑步鞋", "Hiking boots": "登山靴", "Tops": "上装",
    "T-shirts": "T恤", "Outerwear": "外套", "Rain jackets": "雨衣", "Bottoms": "下装", "Yoga pants": "瑜伽裤",
    "Electronics": "电子产品", "Audio": "音频设备", "Headphones": "耳机", "Bluetooth speakers": "蓝牙音箱",
    "Computer accessories": "电脑配件", "Keyboards": "键盘", "Computer mice": "鼠标", "Phone accessories": "手机配件",
    "Phone cases": "手机壳", "Chargers": "充电器", "Grocery": "食品杂货", "Beverages": "饮料", "Green tea": "绿茶",
    "Coffee beans": "咖啡豆", "Snacks": "零食", "Protein bars": "蛋白棒",
    "Mixed nuts": "混合坚果", "Pantry": "粮油调味",
    "Olive oil": "橄榄油", "Home & Kitchen": "家居厨房", "Bedding": "床上用品", "Pillows": "枕头", "Bed sheets": "床单",
    "Kitchen": "厨房用品", "Water bottles": "水杯", "Frying pans": "煎锅", "Lighting": "照明", "Desk lamps": "台灯",
    "Beauty & Personal Care": "美妆个护", "Skin care": "护肤", "Face moisturizer": "面霜", "Hair care": "护发",
    "Shampoo": "洗发水", "Sports & Outdoors": "运动户外", "Fitness": "健身", "Yoga mats": "瑜伽垫", "Camping": "露营",
    "Tents": "帐篷",
    # product types
    "running shoes": "跑步鞋", "hiking boots": "登山靴", "t-shirt": "T恤",
    "rain jacket": "雨衣", "yoga pants": "瑜伽裤",
    "headphones": "耳机", "bluetooth speaker": "蓝牙音箱", "keyboard": "键盘", "mouse": "鼠标", "phone case": "手机壳",
    "charger": "充电器", "green tea": "绿茶", "coffee beans": "咖啡豆",
    "protein bars": "蛋白棒", "mixed nuts": "混合坚果",
    "olive oil": "橄榄油", "pillow": "枕头", "bed sheets": "床单", "water bottle": "水杯", "frying pan": "煎锅",
    "desk lamp": "台灯", "face moisturizer": "面霜", "shampoo": "洗发水", "yoga mat": "瑜伽垫", "tent": "帐篷",
    # attributes
    "waterproof": "防水", "breathable": "透气", "lightweight": "轻便", "non slip": "防滑", "cushioned": "缓震",
    "wide fit": "宽楦", "insulated": "保温", "leather": "真皮", "ankle support": "护踝", "cotton": "纯棉",
    "slim fit": "修身", "short sleeve": "短袖", "moisture wicking": "速干", "machine washable": "可机洗",
    "hooded": "连帽", "packable": "可收纳", "windproof": "防风", "high waist": "高腰", "stretchy": "弹力",
    "with pockets": "带口袋", "wireless": "无线", "noise cancelling": "降噪", "over ear": "头戴式", "bluetooth": "蓝牙",
    "foldable": "可折叠", "long battery life": "长续航", "portable": "便携", "bass boost": "重低音",
    "mechanical": "机械", "backlit": "背光", "ergonomic": "人体工学", "compact": "小巧", "rechargeable": "可充电",
    "silent click": "静音", "shockproof": "防摔", "slim": "超薄", "clear": "透明", "magnetic": "磁吸",
    "fast charging": "快充", "usb c": "Type-C接口", "foldable plug": "折叠插头", "organic": "有机", "decaf": "低咖啡因",
    "gluten free": "无麸质", "non gmo": "非转基因", "loose leaf": "散装茶叶", "dark roast": "深度烘焙",
    "fair trade": "公平贸易", "whole bean": "整豆", "low acid": "低酸", "low sugar": "低糖", "vegan": "纯素",
    "high protein": "高蛋白", "keto friendly": "生酮友好", "unsalted": "无盐", "roasted": "烘烤",
    "extra virgin": "特级初榨", "cold pressed": "冷榨", "memory foam": "记忆棉", "hypoallergenic": "防过敏",
    "cooling": "凉感", "firm": "硬质", "deep pocket": "深口袋", "wrinkle free": "免熨", "stainless steel": "不锈钢",
    "leak proof": "防漏", "bpa free": "不含双酚A", "dishwasher safe": "可洗碗机清洗", "non stick": "不粘",
    "induction compatible": "电磁炉适用", "oven safe": "可进烤箱", "granite coated": "麦饭石涂层", "led": "LED",
    "dimmable": "可调光", "usb charging": "USB充电", "eye caring": "护眼", "fragrance free": "无香精",
    "for sensitive skin": "敏感肌适用", "spf 30": "防晒SPF30", "hyaluronic acid": "玻尿酸", "oil free": "无油",
    "sulfate free": "无硫酸盐", "paraben free": "无防腐剂", "for dry hair": "干性发质适用", "natural": "天然",
    "extra thick": "加厚", "eco friendly": "环保", "with carrying strap": "带背带", "easy setup": "速开",
    # option names
    "size": "尺码", "color": "颜色", "flavor": "口味", "count": "数量", "layout": "布局", "model": "型号",
    "wattage": "功率", "scent": "香味", "thickness": "厚度", "capacity": "容量", "width": "鞋宽",
    # option values
    "black": "黑色", "white": "白色", "blue": "蓝色", "red": "红色", "green": "绿色", "gray": "灰色", "navy": "藏青色",
    "pink": "粉色", "beige": "米色", "purple": "紫色", "US": "美式", "UK": "英式", "DE": "德式", "FR": "法式",
    "jasmine": "茉莉", "mint": "薄荷", "lemon": "柠檬", "honey": "蜂蜜", "original": "原味", "vanilla": "香草",
    "hazelnut": "榛子", "caramel": "焦糖", "chocolate": "巧克力", "peanut butter": "花生酱", "berry": "莓果",
    "cookie dough": "曲奇", "sea salt": "海盐", "honey roasted": "蜂蜜烘烤", "standard": "标准", "queen": "大号",
    "king": "特大号", "twin": "单人", "full": "双人", "lavender": "薰衣草", "coconut": "椰子", "unscented": "无香",
    "citrus": "柑橘", "regular": "标准宽", "wide": "加宽", "extra wide": "特宽",
    # brands and series
    "Northwind": "北风", "Arcwell": "弧光", "Bluepeak": "蓝峰", "Cedarline": "雪松", "Driftwood": "浮木",
    "Evergreen": "常青", "Foxglove": "狐尾", "Granite": "花岗", "Harborview": "港湾", "Ironbark": "铁树",
    "Juniper": "杜松", "Kestrel": "红隼", "Lumen": "流明", "Mapleton": "枫叶", "Nimbus": "云团", "Oakridge": "橡岭",
    "Pinecrest": "松冠", "Quartzite": "石英", "Redwood": "红杉", "Sierra": "山脊", "Tidewater": "潮汐",
    "Umbra": "暗影", "Vantage": "远景", "Willowby": "垂柳", "Xenon": "氙光", "Yarrow": "蓍草", "Zephyr": "和风",
    "Aspenly": "白杨", "Birchwood": "白桦", "Coralis": "珊瑚",
    "Classic": "经典", "Pro": "专业版", "Lite": "轻享", "Max": "极致", "Air": "空气", "Flex": "灵动", "Prime": "臻选",
    "Ultra": "超能", "Sport": "运动款", "Trail": "山径", "Urban": "都市",
    "Nova": "新星", "Edge": "锋锐", "Core": "核心",
    "Plus": "升级版", "Go": "畅行", "Zen": "禅意", "Aero": "飞翔", "Pulse": "脉动", "Terra": "大地",
    # description tails
    "Designed for everyday use.": "适合日常使用。", "Backed by a one year warranty.": "享一年质保。",
    "A customer favourite.": "深受顾客喜爱。", "Carefully checked before shipping.": "发货前经过仔细检查。",
    "Great value for the price.": "物超所值。", "Makes a thoughtful gift.": "送礼佳选。",
}

_UNITS = {"oz": "盎司", "lb": "磅", "pack": "件装", "bags": "袋", "ml": "毫升", "l": "升", "inch": "英寸", "mm": "毫米",
          "person": "人"}


def _unit(term: str) -> str | None:
    m = re.fullmatch(r"([0-9.]+) (\w+)", term)
    if m and m.group(2) in _UNITS:
        return m.group(1) + _UNITS[m.group(2)]
    m = re.fullmatch(r"phone (\d+)", term)
    if m:
        return "手机" + m.group(1)
    return None


class _Table(dict):
    """``ZH[term]``: the Chinese of an English term (numbers with units are translated by rule)."""

    def get(self, key, default=None):
        if key in self:
            return self[key]
        u = _unit(key)
        return u if u is not None else default

    def covers(self, key) -> bool:
        return key in self or _unit(key) is not None or re.fullmatch(r"[0-9A-Z]+W?", key) is not None


ZH = _Table(_WORDS)

LABELS = {
    "site": "云购商城", "home": "首页", "search": "搜索", "search_placeholder": "搜索商品", "cart": "购物车",
    "sort_relevance": "排序：相关度", "sort_price_asc": "排序：价格从低到高", "sort_price_desc": "排序：价格从高到低",
    "sort_rating": "排序：评分", "next": "下一页 >", "prev": "< 上一页", "page_of": "第 {i} 页，共 {n} 页",
    "results_for": "“{q}” 的搜索结果：共 {n} 件", "no_results": "没有找到与 “{q}” 相关的商品。",
    "buy_now": "立即购买", "add_to_cart": "加入购物车", "back_to_search": "返回搜索", "price": "价格",
    "rating": "评分", "reviews": "条评价", "features": "特点", "description": "商品描述",
    "added": "已将 {title} 加入购物车", "chosen": "已选", "all_chosen": "选项已选齐",
    "sorted": "已排序", "view_cart": "查看购物车", "continue": "继续购物",
    "cart_title": "购物车", "cart_empty": "购物车是空的。", "quantity": "数量", "remove": "删除", "checkout": "结算",
    "checkout_title": "结算", "full_name": "姓名", "address": "地址", "place_order": "提交订单",
    "checkout_error": "请填写姓名和地址。", "order_title": "订单 #{n} 已确认", "order_thanks": "感谢您的购买！",
    "ship_to": "收货人", "welcome": "欢迎光临云购商城，请搜索您需要的商品。", "not_found": "页面不存在",
    "bad_request": "请求无效", "total": "合计", "currency": "¥", "back_home": "返回首页",
}

SURNAMES = ("张", "王", "李", "刘", "陈", "杨", "赵", "黄", "周", "吴", "徐", "孙", "胡", "朱", "高", "林", "何", "郭")
GIVEN_NAMES = ("伟", "芳", "娜", "洋", "静", "磊", "敏", "婷", "杰",
               "琳", "涛", "悦", "强", "丽", "军", "燕", "明", "华")
CITIES = ("北京市朝阳区", "上海市浦东新区", "广州市天河区", "深圳市南山区", "杭州市西湖区", "成都市武侯区",
          "南京市鼓楼区", "武汉市洪山区")
ROADS = ("建国路", "世纪大道", "体育西路", "科技园南路", "文三路", "人民南路", "中山路", "珞喻路", "解放路", "长江路")
